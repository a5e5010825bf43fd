"""Reading and writing experiment files on local disk or a storage URI (s3://, gs://,
file://, memory://), so one code path serves both."""

from __future__ import annotations

import os
import shutil
from typing import Any


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _fs(path: str) -> tuple[Any, str]:
    """The filesystem Train resolves for `path` (s3:// through pyarrow's S3, which needs no
    s3fs; other schemes through fsspec), so Tune reads and writes wherever Train does."""
    from raylite.util._storage import fsspec_filesystem

    return fsspec_filesystem(path)


def join(base: str, *parts: str) -> str:
    if is_uri(base):
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def makedirs(path: str) -> None:
    if is_uri(path):
        fs, where = _fs(path)
        fs.makedirs(where, exist_ok=True)
    else:
        os.makedirs(local_path(path), exist_ok=True)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode())


def write_bytes(path: str, data: bytes) -> None:
    """Write atomically on local disk (a reader never sees half a file)."""
    if is_uri(path):
        fs, where = _fs(path)
        with fs.open(where, "wb") as f:
            f.write(data)
        return
    path = local_path(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_bytes(path: str) -> bytes:
    if is_uri(path):
        fs, where = _fs(path)
        with fs.open(where, "rb") as f:
            return f.read()
    with open(local_path(path), "rb") as f:
        return f.read()


def exists(path: str) -> bool:
    if is_uri(path):
        fs, where = _fs(path)
        return bool(fs.exists(where))
    return os.path.exists(local_path(path))


def copy_dir_in(source_dir: str, dest: str) -> None:
    """Copy a local directory's files to dest (a local path or a URI)."""
    if is_uri(dest):
        fs, where = _fs(dest)
        fs.makedirs(where, exist_ok=True)
        for root, _, files in os.walk(source_dir):
            rel = os.path.relpath(root, source_dir)
            for name in files:
                target = where if rel == "." else f"{where}/{rel}"
                fs.put_file(os.path.join(root, name), f"{target}/{name}")
        return
    dest = local_path(dest)
    if os.path.abspath(source_dir) != os.path.abspath(dest):
        shutil.copytree(source_dir, dest, dirs_exist_ok=True)
