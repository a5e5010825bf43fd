"""Checkpoint objects and the run's storage layout, on local paths and fsspec URIs."""

import os
import stat

import fsspec
import pytest

from raylite.train import Checkpoint
from raylite.train._internal.storage import (
    StorageContext,
    StorageError,
    pack_directory,
    split_run_path,
    unpack_bytes,
)


def make_dir(path, files):
    os.makedirs(path, exist_ok=True)
    for name, text in files.items():
        full = os.path.join(path, name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return path


def test_from_directory_as_directory_to_directory(tmp_path):
    src = make_dir(str(tmp_path / "src"), {"model.pt": "w", "sub/opt.pt": "o"})
    ckpt = Checkpoint.from_directory(src)
    with ckpt.as_directory() as d:
        assert d == src  # local: no copy
    out = ckpt.to_directory(str(tmp_path / "out"))
    assert open(os.path.join(out, "sub/opt.pt")).read() == "o"
    assert "local" in repr(ckpt) and src in repr(ckpt)


def test_dict_checkpoint_roundtrip_and_plain_dir_error(tmp_path):
    ckpt = Checkpoint.from_dict({"epoch": 3, "weights": [1, 2]})
    assert ckpt.to_dict() == {"epoch": 3, "weights": [1, 2]}
    plain = Checkpoint.from_directory(make_dir(str(tmp_path / "p"), {"a": "1"}))
    with pytest.raises(ValueError, match="from_dict"):
        plain.to_dict()
    with pytest.raises(TypeError):
        Checkpoint.from_dict([1, 2])


def test_remote_filesystem_checkpoint_downloads(tmp_path):
    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/ck/model.pt", b"weights")
    ckpt = Checkpoint("memory://bucket/ck")
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "model.pt"), "rb").read() == b"weights"
    assert not os.path.exists(d)
    ckpt.update_metadata({"step": 4})
    assert ckpt.get_metadata() == {"step": 4}


def test_storage_layout_local_and_uri(tmp_path):
    local = StorageContext.create(str(tmp_path), "run")
    uri = StorageContext.create(f"file://{tmp_path}", "run")
    assert local.is_local and uri.is_local
    assert local.experiment_path == str(tmp_path / "run")
    local.validate_writable()
    src = make_dir(str(tmp_path / "src"), {"a.txt": "A"})
    uri.persist_directory(src, "checkpoint_000003")
    local.persist_directory(make_dir(str(tmp_path / "src2"), {"b.txt": "B"}), "checkpoint_000003")
    merged = sorted(os.listdir(tmp_path / "run" / "checkpoint_000003"))
    assert merged == ["a.txt", "b.txt"]  # files from two ranks merge
    assert local.next_checkpoint_index() == 4
    local.delete_checkpoint("checkpoint_000003")
    assert local.next_checkpoint_index() == 0


def test_memory_uri_storage():
    s = StorageContext.create("memory://results", "exp")
    assert not s.is_local and s.experiment_path == "memory://results/exp"
    s.validate_writable()
    s.write_bytes("x.json", b"{}")
    assert s.read_bytes("x.json") == b"{}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_storage_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with pytest.raises(StorageError, match="not writable"):
        StorageContext.create(str(ro), "run").validate_writable()


def test_storage_path_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StorageError, match="storage_path"):
        StorageContext.create(str(f), "run").validate_writable()


def test_pack_unpack(tmp_path):
    src = make_dir(str(tmp_path / "src"), {"a": "1", "d/b": "2"})
    unpack_bytes(pack_directory(src), str(tmp_path / "dst"))
    assert open(tmp_path / "dst" / "d" / "b").read() == "2"


def test_split_run_path(tmp_path):
    assert split_run_path(str(tmp_path / "exp") + "/") == (str(tmp_path), "exp")
    assert split_run_path("s3://bucket/results/exp") == ("s3://bucket/results", "exp")


def test_deleting_an_old_checkpoint_survives_a_rank_still_writing_into_it(tmp_path):
    import threading

    from raylite.train._internal.storage import StorageContext

    storage = StorageContext.create(str(tmp_path), "race")
    folder = tmp_path / "race" / "checkpoint_000001"
    folder.mkdir(parents=True)
    for i in range(200):
        (folder / f"rank0_{i}.bin").write_bytes(b"x")
    stop = threading.Event()
    writer_errors: list[BaseException] = []

    def late_rank():  # keeps adding its files while the folder is being removed
        try:
            write_files()
        except BaseException as e:  # noqa: BLE001 - a dead writer would no longer race the delete
            writer_errors.append(e)

    def write_files():
        i = 0
        while not stop.is_set() and i < 400:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"rank1_{i}.bin").write_bytes(b"y")
            # removed between mkdir and the write: that is the race. mkdir(exist_ok=True) itself
            # raises FileExistsError when the folder goes between its mkdir and its is_dir check
            except (FileNotFoundError, FileExistsError):
                continue
            i += 1

    writer = threading.Thread(target=late_rank)
    writer.start()
    try:
        storage.delete_checkpoint("checkpoint_000001")  # must not raise
    finally:
        stop.set()
        writer.join()
    assert writer_errors == []
