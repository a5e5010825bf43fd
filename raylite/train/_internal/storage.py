"""Storage layout of one run, on a local path or any fsspec URI.

    <storage_path>/<name>/
        trainer.pkl            the trainer as constructed (TorchTrainer.restore reads it)
        run_state.json         reports so far, kept checkpoints, failures (RunState)
        checkpoint_000000/     one folder per reported checkpoint; every rank's files merge here
        checkpoint_000001/ ...

Workers and the driver both hold a StorageContext (it pickles as two strings, or the
user's filesystem object), so either side can write checkpoints.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from raylite.train._internal.filesystems import to_fsspec
from raylite.train.checkpoint import upload_dir
from raylite.util._storage import explain_storage_error, fsspec_filesystem

DEFAULT_STORAGE_PATH = "~/raylite_results"
TRAINER_FILE = "trainer.pkl"
STATE_FILE = "run_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d{6,})$")


class StorageError(OSError):
    """The run's storage_path cannot be used; the message names the path and the fix."""


class StoragePermissionError(StorageError, PermissionError):
    """The storage refused this process's credentials."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The storage's bucket (or root) does not exist."""


def checkpoint_dir_name(index: int) -> str:
    return f"checkpoint_{index:06d}"


@dataclass(frozen=True)
class StorageContext:
    """Where one run keeps its files: ``storage_path/experiment_name``."""

    storage_path: str
    experiment_name: str
    filesystem: Any = field(default=None, compare=False)

    @classmethod
    def create(
        cls, storage_path: str | None, experiment_name: str, filesystem: Any = None
    ) -> StorageContext:
        path = storage_path or DEFAULT_STORAGE_PATH
        if filesystem is None and "://" not in path:
            path = os.path.abspath(os.path.expanduser(path))
        return cls(path, experiment_name, None if filesystem is None else to_fsspec(filesystem))

    # -- resolved filesystem ------------------------------------------------------
    def _resolved(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """Resolved once per process (an S3 client is costly), never pickled: each process
        resolves a URI with its own environment, as Ray's workers do."""
        cached = self.__dict__.get("_resolved_fs")
        if cached is None:
            cached = fsspec_filesystem(self.storage_path, self.filesystem)
            object.__setattr__(self, "_resolved_fs", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_resolved_fs"}

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return self._resolved()[0]

    @property
    def _root(self) -> str:
        return self._resolved()[1].rstrip("/") or "/"

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @property
    def experiment_fs_path(self) -> str:
        """The run directory as a path on ``fs``."""
        return f"{self._root}/{self.experiment_name}"

    @property
    def experiment_path(self) -> str:
        """The run directory as the user wrote it (a URI when not local): Result.path."""
        if self.is_local or self.filesystem is not None:
            return self.experiment_fs_path
        return f"{self.storage_path.rstrip('/')}/{self.experiment_name}"

    def checkpoint_fs_path(self, dir_name: str) -> str:
        return f"{self.experiment_fs_path}/{dir_name}"

    # -- checks and listing -------------------------------------------------------
    def validate_writable(self) -> None:
        """Create the run directory and write a probe file, before any worker starts."""
        probe = f"{self.experiment_fs_path}/.write_probe_{uuid.uuid4().hex[:8]}"
        try:
            self.fs.makedirs(self.experiment_fs_path, exist_ok=True)
            with self.fs.open(probe, "wb") as f:
                f.write(b"ok")
            self.fs.rm(probe)
        except Exception as e:  # noqa: BLE001 - any filesystem error means the same thing here
            explained = explain_storage_error(self.experiment_path, e, "writing the run's results to",
                                              "storage_filesystem") if isinstance(e, OSError) else None
            if explained is not None:
                cls = StoragePermissionError if isinstance(explained, PermissionError) else StorageNotFoundError
                raise cls(f"RunConfig(storage_path={self.storage_path!r}): {explained}") from e
            raise StorageError(
                f"RunConfig(storage_path={self.storage_path!r}) is not writable: creating "
                f"{self.experiment_path} failed with {type(e).__name__}: {e}. Pass a "
                "storage_path you can write to (a local directory, or a URI such as "
                "s3://bucket/path with credentials set up)."
            ) from e

    def list_checkpoint_indices(self) -> list[int]:
        """Indices of the checkpoint folders present now (including partial ones)."""
        try:
            entries = self.fs.ls(self.experiment_fs_path, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            m = _CHECKPOINT_RE.match(entry.rstrip("/").rsplit("/", 1)[-1])
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def next_checkpoint_index(self) -> int:
        """First index no folder uses yet, so a new attempt never writes into an old one."""
        indices = self.list_checkpoint_indices()
        return indices[-1] + 1 if indices else 0

    # -- writing ------------------------------------------------------------------
    def persist_directory(self, local_dir: str, dir_name: str) -> str:
        """Copy a local checkpoint directory into the run's folder ``dir_name``."""
        dest = self.checkpoint_fs_path(dir_name)
        upload_dir(local_dir, self.fs, dest)
        return dest

    def persist_packed(self, data: bytes, dir_name: str) -> str:
        """Unpack a checkpoint shipped from another node (see pack_directory)."""
        tmp = tempfile.mkdtemp(prefix="raylite_unpack_")
        try:
            unpack_bytes(data, tmp)
            return self.persist_directory(tmp, dir_name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete_checkpoint(self, dir_name: str) -> None:
        """Remove a checkpoint num_to_keep let go. Another rank may still be writing its files
        into the same folder: retry briefly, and never fail the run over an old checkpoint."""
        path = self.checkpoint_fs_path(dir_name)
        for _ in range(40):
            try:
                self.fs.rm(path, recursive=True)
                return
            except FileNotFoundError:
                return
            except OSError:  # "directory not empty": a file landed while it was being removed
                time.sleep(0.05)
        warnings.warn(f"raylite.train could not remove the old checkpoint {path} (files were still being "
                      "written into it); it is no longer tracked and can be deleted by hand.", stacklevel=2)

    def write_bytes(self, name: str, data: bytes) -> None:
        path = f"{self.experiment_fs_path}/{name}"
        if self.is_local:
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        else:
            with self.fs.open(path, "wb") as f:
                f.write(data)

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open(f"{self.experiment_fs_path}/{name}", "rb") as f:
            return f.read()

    def exists(self, name: str) -> bool:
        return bool(self.fs.exists(f"{self.experiment_fs_path}/{name}"))


def pack_directory(path: str) -> bytes:
    """A directory as one uncompressed tar, to ship a checkpoint through raylite itself."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=".")
    return buf.getvalue()


def unpack_bytes(data: bytes, dest: str) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        try:
            tar.extractall(dest, filter="data")
        except TypeError:  # Python < 3.10.12 has no extraction filters
            tar.extractall(dest)  # noqa: S202 - packed by this run's own workers


def split_run_path(path: str) -> tuple[str, str]:
    """``storage_path/name`` -> (storage_path, name), for restore()."""
    stripped = path.rstrip("/")
    if "://" not in stripped:
        stripped = os.path.abspath(os.path.expanduser(stripped))
    parent, _, name = stripped.rpartition("/")
    if not name:
        raise ValueError(f"Cannot restore from {path!r}: expected storage_path/run_name.")
    return parent or "/", name
