"""Directories only the cluster's user controls: caches, session and spill dirs, socket dirs.

Why: raylite reuses what it finds at predictable paths under shared temp dirs
(`/tmp/raylite-sessions`, `/tmp/raylite-serve-uris-<uid>`, `/dev/shm/raylite_*`). If another
local user made such a folder first, they own it, and whatever they put inside (an `app.py`, a
virtualenv, a session's address file) would be run or trusted as ours. So every such directory
goes through `owned_dir`: created with `mkdir` (atomic: it either makes the folder, ours, with
the mode asked, or finds one), and a folder that was already there is used only when this user
owns it, it is a real directory (not a symlink), nobody else may write it, and no folder above
it lets another user rename or replace it (each is ours or root's, and sticky where others may
write, as `/tmp`). Anything else is refused with an error naming the path, its owner and the fix.
"""

from __future__ import annotations

import errno
import os
import stat


class UnsafeDirectoryError(PermissionError):
    """A directory raylite would trust belongs to, or can be changed by, another user."""


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _refuse(path: str, why: str) -> UnsafeDirectoryError:
    return UnsafeDirectoryError(
        f"raylite refuses to use {path!r}: {why}. Another local user could plant code or data "
        "there that raylite would run or trust as yours. Remove it (or fix its owner and mode: "
        f"chown $(id -u) and chmod go-w), or point raylite at a directory of your own "
        "(RAYLITE_TEMP_DIR, TMPDIR).")


def _check(path: str, st: os.stat_result, *, private: bool) -> None:
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a directory")
    if st.st_uid != me:
        raise _refuse(path, f"it is owned by {_owner_name(st.st_uid)}, not by this user")
    if st.st_mode & 0o022:
        raise _refuse(path, f"other users may write into it (mode {oct(stat.S_IMODE(st.st_mode))})")
    if private and st.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours and nobody else's writes: only readers to shut out


def _check_ancestors(path: str) -> None:
    """Every folder above `path` must keep other users from renaming what is inside it."""
    me = os.geteuid()
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(parent)  # a symlinked ancestor (/tmp -> /private/tmp) is judged by its target
        writable_by_others = st.st_mode & 0o022
        if st.st_uid not in (me, 0):
            raise _refuse(path, f"the folder above it, {parent!r}, is owned by {_owner_name(st.st_uid)}")
        if writable_by_others and not st.st_mode & stat.S_ISVTX:
            raise _refuse(path, f"other users may rename entries of the folder above it, {parent!r} "
                                f"(mode {oct(stat.S_IMODE(st.st_mode))}, not sticky)")
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


def owned_dir(path: str, mode: int = 0o700, *, private: bool = True) -> str:
    """`path` as a directory this user alone controls (made with `mode` if missing); raises
    UnsafeDirectoryError when it, or a folder above it, is another user's to change.
    `private`: also shut out readers (chmod 0700) of a folder that was already there."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        owned_dir(parent, mode, private=private)
    _check_ancestors(path)
    try:
        os.mkdir(path, mode)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
    _check(path, os.lstat(path), private=private)
    return path
