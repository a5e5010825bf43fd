"""runtime_env working_dir as a package: zipped once by the driver, unpacked once per node.

A driver's local `working_dir` means nothing on another machine, so the directory is
zipped (deterministically: sorted entries, fixed timestamps, so the same tree gives the
same digest), stored in the head's key-value store under its digest, and named in the
task's runtime_env by a `raylite-pkg://<digest>` URI. A worker that needs it unpacks it
into its node's session directory, at most once per node (unpack to a temporary folder,
then an atomic rename).
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import shutil
import tempfile
import zipfile

from raylite._core.private_paths import owned_dir

PKG_SCHEME = "raylite-pkg://"
KV_NAMESPACE = "pkg"
MAX_PACKAGE_BYTES = 512 * 1024 * 1024
ALWAYS_EXCLUDED = (".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".venv")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class PackageTooLargeError(ValueError):
    """The working_dir is larger than what raylite ships to workers."""


HOOK_SCHEME = "raylite-hook://"  # a pickled worker_process_setup_hook in the KV store (KV_NAMESPACE)


def is_package_uri(value: str) -> bool:
    return isinstance(value, str) and value.startswith(PKG_SCHEME)


def digest_of(uri: str) -> str:
    return uri[len(PKG_SCHEME):]


def _excluded(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    if any(p in ALWAYS_EXCLUDED for p in parts):
        return True
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(parts[-1], pat):
            return True
        if any(fnmatch.fnmatch("/".join(parts[:i]), pat) for i in range(1, len(parts))):
            return True
    return False


def _files(root: str, excludes: list[str]) -> list[tuple[str, str, int]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not _excluded(rel_dir + d, excludes))
        for name in sorted(filenames):
            rel = rel_dir + name
            full = os.path.join(dirpath, name)
            if _excluded(rel, excludes) or not os.path.isfile(full):
                continue
            out.append((rel, full, os.path.getsize(full)))
    return out


def package_directory(path: str, excludes: list[str] | None = None,
                      max_bytes: int = MAX_PACKAGE_BYTES, prefix: str = "") -> tuple[str, bytes]:
    """Zip `path` deterministically; returns (digest, zip bytes). Entries go under `prefix`
    (a py_modules package keeps its own folder name, so `import <name>` works)."""
    files = _files(path, list(excludes or []))
    if prefix:
        files = [(f"{prefix}/{rel}", full, size) for rel, full, size in files]
    total = sum(size for _, _, size in files)
    if total > max_bytes:
        biggest = sorted(files, key=lambda f: -f[2])[:5]
        listing = ", ".join(f"{rel} ({size / 2**20:.1f} MiB)" for rel, _, size in biggest)
        raise PackageTooLargeError(
            f"runtime_env working_dir {path!r} holds {total / 2**20:.1f} MiB of files, more than the "
            f"{max_bytes / 2**20:.0f} MiB raylite ships to workers. Largest: {listing}. Leave data out "
            "with runtime_env={'working_dir': ..., 'excludes': ['data/', '*.ckpt']}, and read large "
            "files from shared storage instead.")
    return _zip([(rel, full) for rel, full, _ in files])


def package_module_file(path: str) -> tuple[str, bytes]:
    """A single-file py_modules entry (`helpers.py`)."""
    return _zip([(os.path.basename(path), path)])


def _zip(entries: list[tuple[str, str]]) -> tuple[str, bytes]:
    """Deterministic zip of (name in archive, file) pairs: fixed timestamps, modes kept."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for rel, full in entries:
            info = zipfile.ZipInfo(rel, date_time=_FIXED_TIME)
            info.external_attr = (os.stat(full).st_mode & 0o777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(full, "rb") as f:
                zf.writestr(info, f.read())
    data = buf.getvalue()
    return hashlib.sha1(data).hexdigest(), data


def package_zip_file(path: str) -> tuple[str, bytes]:
    """A working_dir given as a local .zip file ships as it is."""
    with open(path, "rb") as f:
        data = f.read()
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ValueError(f"runtime_env working_dir {path!r} is a file but not a zip archive; pass a "
                         "directory or a .zip file.")
    return hashlib.sha1(data).hexdigest(), data


def unpacked_path(session_dir: str, digest: str) -> str:
    return os.path.join(session_dir, "runtime_resources", "working_dir", digest)


def unpack(data: bytes, session_dir: str, digest: str) -> str:
    """Unpack a package under the node's session dir once; returns its folder."""
    dest = unpacked_path(session_dir, digest)
    if os.path.isdir(dest):
        return dest
    parent = os.path.dirname(dest)
    owned_dir(parent)
    tmp = tempfile.mkdtemp(prefix=f".{digest}-", dir=parent)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for member in zf.infolist():
                target = os.path.realpath(os.path.join(tmp, member.filename))
                if not target.startswith(os.path.realpath(tmp) + os.sep):
                    raise ValueError(f"working_dir package entry {member.filename!r} escapes its folder")
            zf.extractall(tmp)
            for member in zf.infolist():
                mode = (member.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(os.path.join(tmp, member.filename), mode)
        os.rename(tmp, dest)
    except OSError:
        if not os.path.isdir(dest):  # a sibling worker did not win the race either
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
