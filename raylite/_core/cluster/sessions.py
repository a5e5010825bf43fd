"""Session directories outlive their cluster, so the logs of a crashed node can still be read.

Layout under the temp dir (RAYLITE_TEMP_DIR, default /tmp/raylite-sessions):
    session_<date>_<pid>_<rand>/   one per node daemon (a local cluster's head+node is one)
        logs/                      node.err, dashboard.log, worker-<id>-<pid>.out/.err,
                                   job-driver-<submission id>.log
        node.pid                   the daemon's pid while it runs
    session_latest -> session_...  the session most recently started on this machine

When a cluster stops, its session keeps `logs/` and drops what only a running cluster
needs (sockets, unpacked working dirs). Each new session prunes the oldest stopped ones
beyond `sessions_to_keep` (RAYLITE_SESSIONS_TO_KEEP, default 10); a session whose daemon
still runs is never removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil

LATEST = "session_latest"
PID_FILE = "node.pid"
_DISPOSABLE = ("sockets", "runtime_resources", "token", "dashboard_url")


def mark_live(session_dir: str) -> None:
    """Record this daemon's pid in its session and point session_latest at it."""
    with open(os.path.join(session_dir, PID_FILE), "w") as f:
        f.write(str(os.getpid()))
    base = os.path.dirname(session_dir)
    tmp = os.path.join(base, f".{LATEST}.{os.getpid()}")
    with contextlib.suppress(OSError):
        os.remove(tmp)
    os.symlink(os.path.basename(session_dir), tmp)
    os.replace(tmp, os.path.join(base, LATEST))


def is_live(session_dir: str) -> bool:
    """True while the session's daemon runs (its pid is a raylite node daemon of this session)."""
    try:
        with open(os.path.join(session_dir, PID_FILE)) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        # no pid file: a daemon still starting (sockets present) counts as live
        return os.path.isdir(os.path.join(session_dir, "sockets"))
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"raylite._core.cluster.daemon" in argv


def retire(session_dir: str) -> None:
    """The cluster stopped: keep the logs, drop sockets and unpacked packages."""
    spill = [n for n in _listdir(session_dir) if n.startswith("spill_")]
    for name in (*_DISPOSABLE, *spill):
        path = os.path.join(session_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
    with contextlib.suppress(OSError):
        os.remove(os.path.join(session_dir, PID_FILE))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def sessions(temp_dir: str) -> list[str]:
    """Session directories under temp_dir, oldest first (by modification time)."""
    try:
        names = [n for n in os.listdir(temp_dir) if n.startswith("session_") and n != LATEST]
    except OSError:
        return []
    paths = [os.path.join(temp_dir, n) for n in names]
    paths = [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]

    def mtime(p: str) -> float:
        try:
            return os.stat(p).st_mtime
        except OSError:
            return 0.0

    return sorted(paths, key=mtime)


def prune(temp_dir: str, keep_count: int, keep: str = "") -> list[str]:
    """Remove the oldest stopped sessions so at most `keep_count` stopped ones remain."""
    stopped = [p for p in sessions(temp_dir) if p != keep and not is_live(p)]
    doomed = stopped[:max(0, len(stopped) - max(0, keep_count))]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
