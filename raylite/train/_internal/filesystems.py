"""Ray Train speaks pyarrow filesystems; raylite's storage code speaks fsspec. Convert both ways.

`RunConfig(storage_filesystem=pyarrow.fs.S3FileSystem(...))` and `Checkpoint(path, filesystem=...)`
accept a pyarrow filesystem (as in Ray) or an fsspec one; `Result.filesystem` is a pyarrow
filesystem, as in Ray. Importing this module imports `pyarrow.fs`, as `import ray.train` does,
so `pyarrow.fs.LocalFileSystem()` works in programs that only wrote `import pyarrow`.
"""

from __future__ import annotations

from typing import Any

import fsspec
import pyarrow.fs
from fsspec.implementations.arrow import ArrowFSWrapper
from fsspec.implementations.local import LocalFileSystem


def to_fsspec(fs: Any) -> fsspec.AbstractFileSystem:
    """An fsspec view of `fs` (a pyarrow or fsspec filesystem)."""
    if isinstance(fs, fsspec.AbstractFileSystem):
        return fs
    if isinstance(fs, pyarrow.fs.FileSystem):
        return ArrowFSWrapper(fs)  # the user's own object stays inside: Result.filesystem gives it back
    raise TypeError(f"storage_filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, "
                    f"not {type(fs).__name__}.")


def to_pyarrow(fs: fsspec.AbstractFileSystem | None) -> pyarrow.fs.FileSystem | None:
    """The pyarrow filesystem Ray's users get back (Result.filesystem)."""
    if fs is None:
        return None
    if isinstance(fs, ArrowFSWrapper):
        return fs.fs
    if isinstance(fs, LocalFileSystem):
        return pyarrow.fs.LocalFileSystem()
    return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs))
