"""A Train run whose dataset needs CPUs that the run's own workers hold (issue 22).

On a 2-CPU cluster, two training workers of one CPU each leave nothing for the dataset's
read tasks, and the run can never make progress (Ray waits too). raylite reserves the
workers' CPUs for Data (`exclude_resources`, as Ray Train does), so Data knows at once:
the driver gets a warning naming the cause and the fixes, and `raylite status` shows it
while the run waits. Give the cluster a CPU and the run goes on; size the workers to leave
one and it never waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylite
from raylite import train
from raylite._core.cluster import cluster as C
from raylite.train import RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer
from tests.cluster.conftest import make_cluster, wait_until  # noqa: F401 - make_cluster is a fixture

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def count_rows(config):
    rows = sum(len(b["x"]) for b in train.get_dataset_shard("train").iter_batches(batch_size=16))
    train.report({"rows": rows})


@pytest.fixture
def parquet_dir(tmp_path):
    (tmp_path / "data").mkdir()
    for i in range(4):
        pq.write_table(pa.table({"x": list(range(25))}), tmp_path / "data" / f"part-{i}.parquet")
    return str(tmp_path / "data")


DRIVER = """
import sys
import raylite
from raylite import train
from raylite.train import RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer

def count_rows(config):
    rows = sum(len(b["x"]) for b in train.get_dataset_shard("train").iter_batches(batch_size=16))
    train.report({"rows": rows})

raylite.init(address="auto")
TorchTrainer(count_rows, scaling_config=ScalingConfig(num_workers=2),
             datasets={"train": raylite.data.read_parquet(sys.argv[1])},
             run_config=RunConfig(storage_path=sys.argv[2], name="waits", verbose=0)).fit()
"""


def test_dataset_waiting_for_cpus_its_workers_hold_is_reported_at_once(make_cluster, parquet_dir, tmp_path):  # noqa: F811
    c = make_cluster()
    c.add_head(num_cpus=2)
    wait_until(lambda: len(c.alive_ids()) == 1, what="the head")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    err = tmp_path / "driver.err"
    env = {**os.environ, "RAYLITE_TEMP_DIR": c.config.temp_dir, "PYTHONPATH": os.getcwd()}
    started = time.monotonic()
    with open(err, "w") as f:
        driver = subprocess.Popen([sys.executable, str(script), parquet_dir, str(tmp_path / "results")],
                                  stdout=subprocess.DEVNULL, stderr=f, env=env)
    try:
        def warned():
            assert driver.poll() is None, f"the driver exited: {err.read_text()[-2000:]}"
            return "held by the dataset's own consumers" in err.read_text()

        wait_until(warned, timeout_s=90, what="the driver to print the warning")
        waited_s = time.monotonic() - started
        warning = err.read_text()
        assert "need 1 CPU each" in warning and "2 of the cluster's 2 CPUs" in warning
        assert "ScalingConfig(num_workers=...)" in warning and "resources_per_worker" in warning
        assert waited_s < 90
        # the notice is stored before the line is written; status reads it over several requests,
        # any of which may time out on a loaded machine (status then shows the rest without it)
        def status_shows_notice():
            status = C.format_status(C.cluster_status(c.config, c.address))
            return "Warnings" in status and "held by the dataset's own consumers" in status

        wait_until(status_shows_notice, timeout_s=30, what="raylite status to show the notice")
    finally:
        driver.kill()
        driver.wait(30)
    # the run is gone: its notice is no longer shown
    wait_until(lambda: "Warnings" not in C.format_status(C.cluster_status(c.config, c.address)),
               what="the notice to go with its job")


def test_workers_that_leave_a_cpu_for_data_never_wait(make_cluster, parquet_dir, tmp_path, capfd):  # noqa: F811
    c = make_cluster()
    c.add_head(num_cpus=2)
    wait_until(lambda: len(c.alive_ids()) == 1, what="the head")
    raylite.init(address="auto")
    result = TorchTrainer(count_rows,
                          scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                          datasets={"train": raylite.data.read_parquet(parquet_dir)},
                          run_config=RunConfig(storage_path=str(tmp_path / "results"), name="fits", verbose=0)).fit()
    assert result.metrics["rows"] == 50
    assert "held by the dataset's own consumers" not in capfd.readouterr().err
