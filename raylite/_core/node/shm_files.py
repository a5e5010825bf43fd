"""File operations behind the node's object store: recycle, spill, restore, read ranges.

object_store.py decides what should happen; these functions do it, on the
node daemon (in a thread for the big copies). Readers hold a shared `flock` on
every object file they map (serialization.read_file), for as long as the
mapping lives, so `release` can tell whether a freed segment may be reused:
rewriting a file that a reader still maps would change the reader's data.
(That probe runs once per freed object; which objects to spill is decided from
the readers' own reports, see ObjectStore.mapped.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil

from raylite._core.node.object_store import Freed, ObjectStore
from raylite._core.private_paths import owned_dir


def make_dirs(store: ObjectStore) -> None:
    owned_dir(store.directory)
    owned_dir(store.pool_dir)
    if store.spill_dir:
        owned_dir(store.spill_dir)


def spill_free_bytes(store: ObjectStore) -> int | None:
    try:
        return shutil.disk_usage(store.spill_dir).free
    except OSError:
        return None


def release(store: ObjectStore, freed: Freed) -> None:
    """Recycle a freed object's segment when nobody maps it; delete it otherwise."""
    if freed.fallback:
        _release_fallback(store.path(freed.object_id))
        return
    if freed.spill_file:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.spill_path(freed.object_id))
    if not freed.shm:
        return
    path = store.path(freed.object_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            mapped = False
        except BlockingIOError:
            mapped = True
        target = "" if mapped else store.offer_pool_file(os.fstat(fd).st_size)
        if target:
            try:
                os.rename(path, target)
                return
            except OSError:
                store.forget_pool_file(target)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a reader's mapping stays valid until it is dropped
    finally:
        os.close(fd)


def _release_fallback(path: str) -> None:
    """An object larger than the store: its path links to its file on disk; both go. A link
    already renamed to another object's path (a pulled copy's reservation) leaves that
    object's file alone."""
    try:
        target = os.readlink(path)
    except OSError:  # gone (renamed to the object it was written for) or not a link
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)  # a reader's mapping stays valid until it is dropped


def make_fallback_file(store: ObjectStore, object_id: bytes) -> None:
    """An object larger than the store: an empty file for it on disk (the writer sizes and
    fills it), linked from its path in the store, so writers and readers find it there."""
    path = store.path(object_id)
    if os.path.islink(path):
        return  # a retried reservation: made already
    target = store.fallback_path(object_id)
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.close(fd)
    os.symlink(target, path)


def is_fallback_file(store: ObjectStore, object_id: bytes) -> bool:
    return os.path.islink(store.path(object_id))


def drop_pool_files(paths: list[str]) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def take_segment(store: ObjectStore, reuse: str, object_id: bytes) -> None:
    """Give a recycled segment the object's name, so the writer writes into warm pages."""
    if reuse:
        try:
            os.rename(reuse, store.path(object_id))
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(reuse)


def spill(store: ObjectStore, object_id: bytes) -> bool:
    """Copy the object to the spill directory, then drop its shared-memory file."""
    src = store.path(object_id)
    dst = store.spill_path(object_id)
    tmp = dst + ".part"
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(src)  # readers that map it keep their (still valid) pages
    return True


def restore(store: ObjectStore, object_id: bytes, reuse: str) -> bool:
    """Copy a spilled object back into shared memory (into a recycled segment if given)."""
    src = store.spill_path(object_id)
    dst = store.path(object_id)
    tmp = os.path.join(store.pool_dir, f"restore-{object_id.hex()}")
    try:
        if reuse:
            os.rename(reuse, tmp)
        with open(src, "rb") as fin, open(tmp, "r+b" if reuse else "wb") as fout:
            size = os.fstat(fin.fileno()).st_size
            fout.truncate(size)
            offset = 0
            while offset < size:  # kernel-side copy, no trip through Python buffers
                sent = os.sendfile(fout.fileno(), fin.fileno(), offset, min(size - offset, 1 << 30))
                if sent <= 0:
                    raise OSError(f"short copy restoring {src}")
                offset += sent
        os.replace(tmp, dst)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(src)
    return True


def read_range(store: ObjectStore, object_id: bytes, offset: int, length: int) -> tuple[int, bytes] | None:
    """A chunk of the object for another node, from shared memory or the spill file."""
    for path in (store.path(object_id), store.spill_path(object_id) if store.spill_dir else ""):
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                total = os.fstat(f.fileno()).st_size
                f.seek(offset)
                return total, f.read(length)
        except FileNotFoundError:
            continue
    return None


def destroy(store: ObjectStore) -> None:
    shutil.rmtree(store.directory, ignore_errors=True)
    if store.spill_dir:
        shutil.rmtree(store.spill_dir, ignore_errors=True)
