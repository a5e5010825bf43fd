"""Remote `.zip` URIs in a Serve config's runtime_env (`working_dir: https://.../archive.zip`,
as KubeRay's RayService samples use), fetched on the head and handed to raylite as a local
directory, which raylite then ships to every replica as a package.

One download per URI (cached under the temp dir, private to this user); at most
MAX_DOWNLOAD_BYTES; a zip whose only top-level entry is a directory (GitHub's archives) gives
that directory, as Ray does; entries that would land outside the target are refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
import zipfile

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024
_SCHEMES = ("http://", "https://")


def is_remote(uri: object) -> bool:
    return isinstance(uri, str) and uri.startswith(_SCHEMES)


def cache_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), f"raylite-serve-uris-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def fetch(uri: str, cache: str | None = None) -> str:
    """The local directory holding the unpacked `uri` (downloaded now, or earlier)."""
    if not uri.endswith(".zip"):
        raise ValueError(f"runtime_env URI {uri!r}: raylite fetches http(s) URIs of .zip files only")
    cache = cache or cache_dir()
    os.makedirs(cache, mode=0o700, exist_ok=True)
    dest = os.path.join(cache, hashlib.sha256(uri.encode()).hexdigest()[:24])
    if not os.path.isdir(dest):
        part = tempfile.mkdtemp(dir=cache, prefix=".part-")
        try:
            with tempfile.TemporaryFile(dir=cache) as blob:
                _download(uri, blob)
                blob.seek(0)
                _unpack(uri, blob, part)
            try:
                os.rename(part, dest)
            except OSError:  # another request unpacked it meanwhile
                shutil.rmtree(part, ignore_errors=True)
        finally:
            if os.path.isdir(part):
                shutil.rmtree(part, ignore_errors=True)
    entries = os.listdir(dest)
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        return os.path.join(dest, entries[0])
    return dest


def _download(uri: str, out: object) -> None:
    try:
        with urllib.request.urlopen(uri, timeout=60) as r:
            size = 0
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    return
                size += len(chunk)
                if size > MAX_DOWNLOAD_BYTES:
                    raise ValueError(f"runtime_env URI {uri!r} is larger than "
                                     f"{MAX_DOWNLOAD_BYTES // 2**20} MiB")
                out.write(chunk)  # type: ignore[attr-defined]
    except OSError as e:  # urllib's HTTPError and URLError are OSErrors
        raise ValueError(f"runtime_env URI {uri!r} could not be downloaded: {e}") from None


def _unpack(uri: str, blob: object, target: str) -> None:
    try:
        with zipfile.ZipFile(blob) as z:  # type: ignore[arg-type]
            root = os.path.realpath(target)
            for name in z.namelist():
                path = os.path.realpath(os.path.join(target, name))
                if path != root and not path.startswith(root + os.sep):
                    raise ValueError(f"runtime_env URI {uri!r}: the zip entry {name!r} points outside it")
            z.extractall(target)
    except zipfile.BadZipFile:
        raise ValueError(f"runtime_env URI {uri!r} is not a zip file") from None
