"""Data on s3:// against a real S3 API server (moto's, on loopback; see tests/s3_server.py).

The cluster starts after the AWS_* variables are set, so its read and write tasks run in
workers that find the server the way a user's cluster finds S3: by the environment."""

from __future__ import annotations

import io
import sys

import cloudpickle
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylite.data as rd
from tests.s3_server import start_s3_server

pytestmark = pytest.mark.timeout(180)
cloudpickle.register_pickle_by_value(sys.modules[__name__])



@pytest.fixture(scope="module")
def bucket(s3_cluster):
    return s3_cluster.make_bucket("data-tests")


def test_write_parquet_then_read_parquet_round_trip(s3_cluster, bucket):
    rd.range(300, override_num_blocks=3).map_batches(lambda b: {"id": b["id"], "sq": b["id"] ** 2}) \
        .write_parquet(f"s3://{bucket}/squares/")
    files = [k for k in s3_cluster.keys(bucket, "squares/") if k.endswith(".parquet")]
    assert len(files) == 3  # one file per write task
    back = rd.read_parquet(f"s3://{bucket}/squares/").sort("id").take_all()
    assert [r["id"] for r in back] == list(range(300)) and back[7]["sq"] == 49
    # the seed's spelling: a prefix with a trailing slash, columns pushed down
    assert rd.read_parquet(f"s3://{bucket}/squares/", columns=["sq"]).sum("sq") == sum(i * i for i in range(300))


def test_read_parquet_written_by_another_tool(s3_cluster, bucket):
    s3 = s3_cluster.client()
    for i in range(2):
        buf = io.BytesIO()
        pq.write_table(pa.table({"text": [f"row {i}-{j}" for j in range(5)], "label": [j % 2 for j in range(5)]}), buf)
        s3.put_object(Bucket=bucket, Key=f"training-data/part-{i}.parquet", Body=buf.getvalue())
    ds = rd.read_parquet(f"s3://{bucket}/training-data/")
    assert ds.count() == 10 and set(ds.schema().names) == {"text", "label"}


def test_read_csv_from_a_prefix(s3_cluster, bucket):
    s3 = s3_cluster.client()
    s3.put_object(Bucket=bucket, Key="csv/a.csv", Body=b"x,y\n1,a\n2,b\n")
    s3.put_object(Bucket=bucket, Key="csv/b.csv", Body=b"x,y\n3,c\n")
    rows = rd.read_csv(f"s3://{bucket}/csv/").sort("x").take_all()
    assert [(r["x"], r["y"]) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]


def test_read_images_from_a_prefix(s3_cluster, bucket):
    image = pytest.importorskip("PIL.Image")
    s3 = s3_cluster.client()
    for i, color in enumerate([(255, 0, 0), (0, 0, 255)]):
        buf = io.BytesIO()
        image.new("RGB", (4, 3), color).save(buf, format="PNG")
        s3.put_object(Bucket=bucket, Key=f"images/img{i}.png", Body=buf.getvalue())
    rows = rd.read_images(f"s3://{bucket}/images/", include_paths=True).take_all()
    assert sorted(r["path"].rsplit("/", 1)[-1] for r in rows) == ["img0.png", "img1.png"]
    red = next(r["image"] for r in rows if r["path"].endswith("img0.png"))
    assert red.shape == (3, 4, 3) and red.dtype == np.uint8 and tuple(red[0, 0]) == (255, 0, 0)


def test_filesystem_argument_reaches_a_server_the_environment_does_not_name(s3_cluster, bucket):
    other = start_s3_server()
    try:
        other.make_bucket("elsewhere")
        fs = other.arrow_filesystem()
        rd.from_items([{"a": i} for i in range(4)]).write_parquet("elsewhere/out", filesystem=fs)
        assert other.keys("elsewhere", "out/") and not s3_cluster.keys(bucket, "out/")
        assert rd.read_parquet("elsewhere/out", filesystem=fs).sum("a") == 6
    finally:
        other.stop()


def test_missing_bucket_names_the_bucket(s3_cluster):
    with pytest.raises(FileNotFoundError, match=r"S3 bucket 'no-such-bucket' does not exist.*AWS_ENDPOINT_URL"):
        rd.read_parquet("s3://no-such-bucket/training-data/")
    with pytest.raises(FileNotFoundError, match=r"S3 bucket 'no-such-bucket' does not exist"):
        rd.range(3).write_parquet("s3://no-such-bucket/out/")


def test_refused_credentials_name_the_variables(s3_cluster, monkeypatch):
    locked = start_s3_server(check_credentials=True)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", locked.endpoint)  # the driver resolves the paths
        with pytest.raises(PermissionError, match=r"bucket 'locked'.*AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
            rd.read_parquet("s3://locked/training-data/")
    finally:
        locked.stop()
