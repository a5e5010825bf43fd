"""Remote `.zip` URIs in a Serve config's runtime_env (`working_dir: https://.../archive.zip`,
as KubeRay's RayService samples use), fetched on the head and handed to raylite as a local
directory, which raylite then ships to every replica as a package.

One download per URI, cached under the temp dir in a folder this user alone owns and may write
(`owned_dir`: one another local user made first is refused, never reused: its `app.py` would
run as the cluster's user). A cached entry is used only when it is ours and its manifest,
written last, names the URI. At most MAX_DOWNLOAD_BYTES downloaded, and at most
MAX_UNPACKED_BYTES in MAX_UNPACKED_FILES files unpacked, counted while writing (a zip's
declared sizes are not trusted: a 2 MiB zip can expand to gigabytes); a zip whose only top-level
entry is a directory (GitHub's archives) gives that directory, as Ray does; entries that would
land outside the target are refused. Partial downloads of a killed agent are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import urllib.request
import zipfile

from raylite.experimental.channel_security import owned_dir

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024
MAX_UNPACKED_BYTES = 2 * 1024 * 1024 * 1024
MAX_UNPACKED_FILES = 100_000
_SCHEMES = ("http://", "https://")
_PART = ".part-"
_MANIFEST = ".manifest.json"


def is_remote(uri: object) -> bool:
    return isinstance(uri, str) and uri.startswith(_SCHEMES)


def cache_dir() -> str:
    return owned_dir(os.path.join(tempfile.gettempdir(), f"raylite-serve-uris-{os.getuid()}"))


def clean_partial(cache: str) -> None:
    """Remove the `.part-<pid>-*` folders and files of agents that died mid-download."""
    for name in os.listdir(cache):
        if not name.startswith(_PART):
            continue
        pid = name[len(_PART):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue
        path = os.path.join(cache, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fetch(uri: str, cache: str | None = None) -> str:
    """The local directory holding the unpacked `uri` (downloaded now, or earlier)."""
    if not uri.endswith(".zip"):
        raise ValueError(f"runtime_env URI {uri!r}: raylite fetches http(s) URIs of .zip files only")
    cache = owned_dir(cache) if cache else cache_dir()
    clean_partial(cache)
    key = hashlib.sha256(uri.encode()).hexdigest()[:24]
    dest = os.path.join(cache, key)
    if not _cached(dest, uri):
        _discard(dest)
        part = tempfile.mkdtemp(dir=cache, prefix=f"{_PART}{os.getpid()}-")
        try:
            with tempfile.TemporaryFile(dir=cache, prefix=f"{_PART}{os.getpid()}-") as blob:
                _download(uri, blob)
                blob.seek(0)
                _unpack(uri, blob, part)
            try:
                os.rename(part, dest)
            except OSError:  # another request unpacked it meanwhile
                shutil.rmtree(part, ignore_errors=True)
            else:
                _write_manifest(dest, uri)
        finally:
            if os.path.isdir(part):
                shutil.rmtree(part, ignore_errors=True)
        if not _cached(dest, uri):
            raise ValueError(f"runtime_env URI {uri!r}: its unpacked copy in {dest!r} is not this user's")
    entries = os.listdir(dest)
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        return os.path.join(dest, entries[0])
    return dest


def _cached(dest: str, uri: str) -> bool:
    """Whether `dest` is a finished download of `uri` made by this user."""
    me = os.geteuid()
    try:
        st = os.lstat(dest)
        manifest = dest + _MANIFEST
        mst = os.lstat(manifest)
        if not (os.path.isdir(dest) and not os.path.islink(dest) and st.st_uid == me
                and mst.st_uid == me and not (st.st_mode | mst.st_mode) & 0o022):
            return False
        with open(manifest) as f:
            return json.load(f).get("uri") == uri
    except (OSError, ValueError, AttributeError):
        return False


def _write_manifest(dest: str, uri: str) -> None:
    """Written last (beside the entry, not in it: the entry is shipped as the working_dir)."""
    tmp = f"{os.path.dirname(dest)}/{_PART}{os.getpid()}-manifest"
    with open(tmp, "w") as f:
        json.dump({"uri": uri}, f)
    os.replace(tmp, dest + _MANIFEST)


def _discard(dest: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest + _MANIFEST)
    if os.path.islink(dest) or os.path.isfile(dest):
        os.unlink(dest)
    elif os.path.isdir(dest):
        shutil.rmtree(dest)  # an unfinished or foreign entry inside our own cache


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
    """Extract entry by entry, counting the bytes actually written (not the sizes the zip
    declares) against MAX_UNPACKED_BYTES and the entries against MAX_UNPACKED_FILES."""
    try:
        with zipfile.ZipFile(blob) as z:  # type: ignore[arg-type]
            members = z.infolist()
            if len(members) > MAX_UNPACKED_FILES:
                raise ValueError(f"runtime_env URI {uri!r} holds {len(members)} entries, more than "
                                 f"{MAX_UNPACKED_FILES}; ship fewer, larger files")
            root = os.path.realpath(target)
            written = 0
            for member in members:
                path = os.path.realpath(os.path.join(target, member.filename))
                if path != root and not path.startswith(root + os.sep):
                    raise ValueError(f"runtime_env URI {uri!r}: the zip entry {member.filename!r} "
                                     "points outside it")
                if member.is_dir():
                    os.makedirs(path, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(member) as src, open(path, "wb") as out:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > MAX_UNPACKED_BYTES:
                            raise ValueError(f"runtime_env URI {uri!r} unpacks to more than "
                                             f"{MAX_UNPACKED_BYTES // 2**20} MiB; raylite stops there")
                        out.write(chunk)
    except zipfile.BadZipFile:
        raise ValueError(f"runtime_env URI {uri!r} is not a zip file") from None
