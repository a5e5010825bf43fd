"""Path resolution for readers and writers: local paths, globs, directories, URIs.

Every file-based reader turns ``paths`` (a string or list: files, directories
read recursively, glob patterns, ``s3://``/``gs://``/any fsspec URI) into a
pyarrow filesystem plus a sorted list of files with sizes. A path that does
not exist is an error naming that path, raised when the dataset is created.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Sequence
from typing import Any

import pyarrow.fs as pafs

from raylite.util._storage import arrow_filesystem, bucket_of, explain_storage_error


def to_arrow_filesystem(filesystem: Any) -> pafs.FileSystem | None:
    """Accept a pyarrow FileSystem or an fsspec filesystem; return a pyarrow one."""
    if filesystem is None or isinstance(filesystem, pafs.FileSystem):
        return filesystem
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is a data dependency
        fsspec = None
    if fsspec is not None and isinstance(filesystem, fsspec.AbstractFileSystem):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(
        f"filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, got {type(filesystem).__name__}"
    )


def _has_scheme(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def filesystem_for(path: str, filesystem: Any = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``path`` and the path inside it."""
    fs = to_arrow_filesystem(filesystem)
    if fs is not None:
        if _has_scheme(path) and not isinstance(fs, pafs.PyFileSystem):
            path = path.split("://", 1)[1]
        elif path.startswith("file://"):
            path = path[len("file://"):]
        if isinstance(fs, pafs.LocalFileSystem):
            path = os.path.abspath(os.path.expanduser(path))
        return fs, path
    try:
        return arrow_filesystem(path)
    except OSError as e:
        raise explain_storage_error(path, e, "reading or writing", "filesystem") or e


def _is_hidden(name: str) -> bool:
    base = posixpath.basename(name)
    return base.startswith(".") or base.startswith("_")


def _glob(fs: pafs.FileSystem, pattern: str) -> list[pafs.FileInfo]:
    # list from the deepest directory without wildcards, then match the rest
    parts = pattern.split("/")
    fixed: list[str] = []
    for p in parts:
        if any(c in p for c in "*?["):
            break
        fixed.append(p)
    base = "/".join(fixed) or "/"
    recursive = "**" in pattern or len(fixed) < len(parts) - 1
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=recursive, allow_not_found=True))
    return [i for i in infos if fnmatch.fnmatchcase(i.path, pattern)]


def expand_paths(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = None,
) -> tuple[pafs.FileSystem, list[tuple[str, int]]]:
    """Resolve ``paths`` to ``(filesystem, [(file, size_bytes), ...])``, sorted within each input path."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("No paths were given to read.")
    fs: pafs.FileSystem | None = None
    out: list[tuple[str, int]] = []
    for raw in paths:
        this_fs, path = filesystem_for(raw, filesystem)
        fs = fs or this_fs
        if any(c in path for c in "*?["):
            infos = [i for i in _glob(this_fs, path) if i.type == pafs.FileType.File]
            if not infos:
                raise FileNotFoundError(f"No files match the glob pattern {raw!r}.")
        else:
            info = _file_info(this_fs, path, raw)
            if info.type == pafs.FileType.NotFound:
                _raise_if_bucket_missing(this_fs, raw)
                raise FileNotFoundError(f"No such file or directory: {raw!r}")
            if info.type == pafs.FileType.Directory:
                sel = pafs.FileSelector(path, recursive=True)
                infos = [
                    i for i in _file_info(this_fs, sel, raw)
                    if i.type == pafs.FileType.File and not _is_hidden(posixpath.relpath(i.path, path))
                    and not any(_is_hidden(part) for part in posixpath.relpath(i.path, path).split("/")[:-1])
                ]
            else:
                infos = [info]
        infos.sort(key=lambda i: i.path)
        out.extend((i.path, int(i.size or 0)) for i in infos)
    if file_extensions:
        exts = tuple("." + e.lower().lstrip(".") for e in file_extensions)
        kept = [(p, s) for p, s in out if p.lower().endswith(exts)]
        if not kept:
            raise FileNotFoundError(
                f"No files with extensions {list(file_extensions)} found in {paths!r} "
                f"(found {len(out)} other files)."
            )
        out = kept
    if not out:
        raise FileNotFoundError(f"No files found in {paths!r}.")
    assert fs is not None
    return fs, out


def _file_info(fs: pafs.FileSystem, what: Any, raw: str) -> Any:
    try:
        return fs.get_file_info(what)
    except OSError as e:
        raise explain_storage_error(raw, e, "reading", "filesystem") or e


def _raise_if_bucket_missing(fs: pafs.FileSystem, raw: str) -> None:
    """S3 answers "not found" for a key in a bucket that does not exist: say which it is."""
    if not raw.startswith(("s3://", "s3a://")):
        return
    bucket = bucket_of(raw)
    try:
        missing = fs.get_file_info(bucket).type == pafs.FileType.NotFound
    except OSError:
        return
    if missing:
        raise explain_storage_error(raw, FileNotFoundError(f"Bucket '{bucket}' not found"), "reading",
                                    "filesystem") or FileNotFoundError(raw)


def parse_hive_partitions(path: str, base_dirs: Sequence[str]) -> dict[str, str]:
    """``.../year=2024/month=01/part.parquet`` -> ``{"year": "2024", "month": "01"}``."""
    parts = path.split("/")[:-1]
    found: dict[str, str] = {}
    for part in parts:
        if "=" in part:
            key, _, value = part.partition("=")
            if key and not key.startswith(("_", ".")):
                found[key] = value
    return found
