"""Checkpoint: a directory of files on some filesystem (local or any fsspec URI).

A checkpoint is only a reference: ``path`` on ``filesystem``. Reporting one from a
worker copies its files into the run's storage; reading one back
(``as_directory``/``to_directory``) downloads it when it is not local.
``from_dict``/``to_dict`` (Ray's older API, still used by the user's documents) keep a
pickled dict in one file of such a directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import cloudpickle
import fsspec
from fsspec.implementations.local import LocalFileSystem

from raylite.train._internal.filesystems import to_fsspec
from raylite.util._storage import fsspec_filesystem, uri_scheme

DICT_CHECKPOINT_FILE = "dict_checkpoint.pkl"
METADATA_FILE = ".metadata.json"


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


class Checkpoint:
    """A directory of checkpoint files, e.g. ``Checkpoint.from_directory(tmpdir)``."""

    def __init__(
        self, path: str | os.PathLike[str], filesystem: fsspec.AbstractFileSystem | None = None
    ) -> None:
        where = os.fspath(path)
        if filesystem is None:
            filesystem, where = fsspec_filesystem(where)  # s3:// and gs:// through pyarrow, as in Ray
        else:  # Ray passes pyarrow filesystems; the code below speaks fsspec
            filesystem = to_fsspec(filesystem)
        self.path: str = where
        self.filesystem: fsspec.AbstractFileSystem = filesystem
        # Set by from_dict: the directory is ours, so report() may delete it once copied.
        self._owned_tempdir = False

    # -- constructors -------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """Reference a local (or fsspec URI) directory; nothing is copied yet."""
        return cls(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """Pickle ``data`` into a fresh temporary directory (kept for Ray 1.x/2.0 code)."""
        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict needs a dict, got {type(data).__name__}.")
        tmpdir = tempfile.mkdtemp(prefix="raylite_dict_ckpt_")
        with open(os.path.join(tmpdir, DICT_CHECKPOINT_FILE), "wb") as f:
            cloudpickle.dump(data, f)
        ckpt = cls(tmpdir)
        ckpt._owned_tempdir = True
        return ckpt

    # -- readers ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The dict saved by ``from_dict``; a plain directory checkpoint has none."""
        file = f"{self.path.rstrip('/')}/{DICT_CHECKPOINT_FILE}"
        if not self.filesystem.exists(file):
            raise ValueError(
                f"Checkpoint at {self.path} was not made by Checkpoint.from_dict "
                f"(no {DICT_CHECKPOINT_FILE}); read its files with as_directory() instead."
            )
        with self.filesystem.open(file, "rb") as f:
            data = pickle.load(f)  # noqa: S301 - checkpoints are written by this run's own code
        return data

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the files: the checkpoint itself when local,
        otherwise a temporary download that is removed on exit."""
        if _is_local(self.filesystem):
            yield self.path
            return
        tmpdir = tempfile.mkdtemp(prefix="raylite_ckpt_")
        try:
            self.to_directory(tmpdir)
            yield tmpdir
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the files into ``path`` (a new temporary directory when None); returns it."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="raylite_ckpt_")
        os.makedirs(dest, exist_ok=True)
        if _is_local(self.filesystem):
            if os.path.abspath(dest) != os.path.abspath(self.path):
                shutil.copytree(self.path, dest, dirs_exist_ok=True)
        else:
            download_dir(self.filesystem, self.path, dest)
        return dest

    # -- metadata (small JSON next to the files) ----------------------------------
    def get_metadata(self) -> dict[str, Any]:
        file = f"{self.path.rstrip('/')}/{METADATA_FILE}"
        if not self.filesystem.exists(file):
            return {}
        with self.filesystem.open(file, "r") as f:
            return json.load(f)

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        file = f"{self.path.rstrip('/')}/{METADATA_FILE}"
        self.filesystem.makedirs(self.path, exist_ok=True)
        with self.filesystem.open(file, "w") as f:
            json.dump(metadata, f)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    # -- identity -----------------------------------------------------------------
    @property
    def _uri(self) -> str:
        if _is_local(self.filesystem):
            return self.path
        return f"{uri_scheme(self.filesystem)}://{self.path}"

    def __repr__(self) -> str:
        kind = "local" if _is_local(self.filesystem) else type(self.filesystem).__name__
        return f"Checkpoint(filesystem={kind}, path={self.path})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other._uri == self._uri

    def __hash__(self) -> int:
        return hash(self._uri)


def download_dir(fs: fsspec.AbstractFileSystem, src: str, dest: str) -> None:
    """Copy every file under ``src`` on ``fs`` into local ``dest``."""
    src = src.rstrip("/")
    for file in fs.find(src):
        rel = file[len(src) :].lstrip("/")
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.get_file(file, target)


def upload_dir(local_dir: str, fs: fsspec.AbstractFileSystem, dest: str) -> None:
    """Copy the files of ``local_dir`` into ``dest`` on ``fs``, merging with what is there.

    Each file is written under a temporary name and renamed into place on local
    filesystems, so ranks writing the same file at once never leave a torn one.
    """
    dest = dest.rstrip("/")
    fs.makedirs(dest, exist_ok=True)
    for root, _dirs, files in os.walk(local_dir):
        rel_root = os.path.relpath(root, local_dir)
        target_root = dest if rel_root == "." else f"{dest}/{rel_root.replace(os.sep, '/')}"
        fs.makedirs(target_root, exist_ok=True)
        for name in files:
            src = os.path.join(root, name)
            target = f"{target_root}/{name}"
            if _is_local(fs):
                tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
                shutil.copyfile(src, tmp)
                os.replace(tmp, target)
            else:
                fs.put_file(src, target)
