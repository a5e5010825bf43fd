"""Ray Train contracts Ray's docs rely on: pyarrow filesystems in (storage_filesystem, Checkpoint), a
pyarrow filesystem out (Result.filesystem), `import raylite.train` importing pyarrow.fs, and the
error classes (WorkerGroupError with worker_failures)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import cloudpickle
import pyarrow.fs
import pytest

from raylite import train
from raylite.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig
from raylite.train._internal.filesystems import to_fsspec, to_pyarrow
from raylite.train._internal.storage import StorageContext

cloudpickle.register_pickle_by_value(sys.modules[__name__])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_import_train_makes_pyarrow_fs_available():
    code = "import raylite.train\nimport pyarrow\nprint(type(pyarrow.fs.LocalFileSystem()).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "LocalFileSystem"


def test_pyarrow_filesystem_is_accepted_for_storage_and_checkpoints(tmp_path):
    storage = StorageContext.create(str(tmp_path), "run", pyarrow.fs.LocalFileSystem())
    storage.validate_writable()
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.pt").write_bytes(b"weights")
    storage.persist_directory(str(src), "checkpoint_000000")
    assert (tmp_path / "run" / "checkpoint_000000" / "model.pt").read_bytes() == b"weights"
    ckpt = Checkpoint(str(tmp_path / "run" / "checkpoint_000000"), filesystem=pyarrow.fs.LocalFileSystem())
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "model.pt"), "rb").read() == b"weights"


def test_conversions_round_trip_and_refuse_other_objects():
    arrow = pyarrow.fs.LocalFileSystem()
    assert to_pyarrow(to_fsspec(arrow)) is arrow
    assert isinstance(to_pyarrow(to_fsspec(pyarrow.fs.SubTreeFileSystem("/tmp", arrow))),
                      pyarrow.fs.SubTreeFileSystem)
    with pytest.raises(TypeError, match="storage_filesystem"):
        to_fsspec("not a filesystem")


def _report_once(config):
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "w.txt"), "w").write("x")
        train.report({"loss": 0.5}, checkpoint=Checkpoint.from_directory(d))


@pytest.mark.usefixtures("cluster")
def test_run_with_a_pyarrow_storage_filesystem(tmp_path):
    result = DataParallelTrainer(
        _report_once, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=str(tmp_path), name="arrowfs",
                             storage_filesystem=pyarrow.fs.LocalFileSystem()),
    ).fit()
    assert isinstance(result.filesystem, pyarrow.fs.FileSystem)
    info = result.filesystem.get_file_info(result.path)
    assert info.type == pyarrow.fs.FileType.Directory
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "w.txt")).read() == "x"


def _fails(config):
    raise ValueError("broken loop")


@pytest.mark.usefixtures("cluster")
def test_worker_failure_raises_worker_group_error(tmp_path):
    trainer = DataParallelTrainer(_fails, scaling_config=ScalingConfig(num_workers=1),
                                  run_config=RunConfig(storage_path=str(tmp_path), name="fails"))
    with pytest.raises(train.WorkerGroupError) as err:
        trainer.fit()
    assert isinstance(err.value, train.TrainingFailedError)
    assert isinstance(err.value.worker_failures[0], ValueError)
    assert issubclass(train.ControllerError, train.TrainingFailedError)


def _reports_then_lists(config):
    for epoch in range(2):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "epoch.txt"), "w").write(str(epoch))
            train.report({"loss": 1.0 / (epoch + 1)}, checkpoint=Checkpoint.from_directory(d))
    seen = train.get_all_reported_checkpoints()
    contents = []
    for reported in seen:
        with reported.checkpoint.as_directory() as d:
            contents.append(open(os.path.join(d, "epoch.txt")).read())
    train.report({"seen_losses": [r.metrics["loss"] for r in seen], "seen_contents": contents,
                  "statuses": [r.status.value for r in seen]})


@pytest.mark.usefixtures("cluster")
def test_get_all_reported_checkpoints_inside_the_loop(tmp_path):
    result = DataParallelTrainer(
        _reports_then_lists, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=str(tmp_path), name="reported")).fit()
    assert result.metrics["seen_losses"] == [1.0, 0.5]
    assert result.metrics["seen_contents"] == ["0", "1"]
    assert result.metrics["statuses"] == ["COMMITTED", "COMMITTED"]
