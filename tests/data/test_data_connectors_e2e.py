"""Connectors on a real local cluster: PostgreSQL (a server this test starts) and Lance,
read and written by tasks in worker processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import cloudpickle
import numpy as np
import pyarrow as pa
import pytest

import raylite.data as rd

pytestmark = pytest.mark.usefixtures("ray_cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PG_BIN = "/usr/lib/postgresql/15/bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server on loopback (Debian's postgresql package), or a skip."""
    pytest.importorskip("psycopg2")
    initdb = os.path.join(PG_BIN, "initdb")
    if not os.path.exists(initdb):
        initdb = shutil.which("initdb") or ""
    if not initdb:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    bin_dir = os.path.dirname(os.path.realpath(initdb))
    root = Path(tempfile.mkdtemp(prefix="raylite-pg-"))  # not under pytest's 0700 root
    prefix: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the postgres user
        if not shutil.which("runuser"):
            shutil.rmtree(root)
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        prefix = ["runuser", "-u", "postgres", "--"]
        try:
            shutil.chown(root, "postgres")
        except (LookupError, OSError) as e:
            shutil.rmtree(root)
            pytest.skip(f"no postgres user to run the server as: {e}")
    data, port = str(root / "data"), _free_port()
    try:
        subprocess.run([*prefix, os.path.join(bin_dir, "initdb"), "-D", data, "-A", "trust", "-U",
                        "postgres"], check=True, capture_output=True, timeout=120)
        subprocess.run([*prefix, os.path.join(bin_dir, "pg_ctl"), "-D", data, "-w", "-t", "120", "-l",
                        str(root / "log"), "-o",
                        f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"],
                       check=True, capture_output=True, timeout=180)
    except (subprocess.SubprocessError, OSError) as e:
        detail = getattr(e, "stderr", b"") or b""
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be started here: {e} {detail.decode(errors='replace')[-300:]}")
    yield {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "postgres"}
    subprocess.run([*prefix, os.path.join(bin_dir, "pg_ctl"), "-D", data, "-m", "immediate", "stop"],
                   capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


def test_postgres_write_then_sharded_read(postgres):
    import psycopg2

    def connect():
        return psycopg2.connect(**postgres)

    with connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id BIGINT, name TEXT, score DOUBLE PRECISION)")
    n = 500
    data = pa.table({"id": np.arange(n), "name": [f"n{i}" for i in range(n)], "score": np.arange(n) / 4})
    rd.from_arrow(data).repartition(4).write_sql("INSERT INTO items VALUES (%s, %s, %s)", connect)
    with connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(id) FROM items")
        assert cur.fetchone() == (n, sum(range(n)))

    # PostgreSQL has MOD/ABS and hashtext(): four tasks, each one hash shard of the rows
    ds = rd.read_sql("SELECT * FROM items", connect, shard_keys=["name"], shard_hash_fn="hashtext",
                     override_num_blocks=4)
    assert len(ds._logical.datasource.get_read_tasks(4)) == 4
    got = ds.to_pandas().sort_values("id")
    assert got["id"].tolist() == list(range(n)) and got["score"].tolist() == (np.arange(n) / 4).tolist()
    # an integer key has no hashtext(integer): Ray's fallback, one task, same rows
    fallback = rd.read_sql("SELECT * FROM items", connect, shard_keys=["id"], shard_hash_fn="hashtext")
    assert len(fallback._logical.datasource.get_read_tasks(4)) == 1 and fallback.count() == n
    with pytest.raises(psycopg2.errors.UndefinedTable, match="nope"):
        rd.read_sql("SELECT * FROM nope", connect).materialize()


def test_lance_on_workers(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "e2e.lance")
    rd.range(400, override_num_blocks=4).map_batches(lambda b: {"id": b["id"], "sq": b["id"] ** 2}) \
        .write_lance(uri, max_rows_per_file=100)
    assert lance.dataset(uri).count_rows() == 400
    total = rd.read_lance(uri, filter="id % 2 = 0").sum("sq")
    assert total == sum(i * i for i in range(0, 400, 2))
