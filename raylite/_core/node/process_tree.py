"""Every process a node's workers started ends with the node.

A task that runs `subprocess.Popen(["sleep", "600"])`, or a library that starts a server which
double-forks into a daemon (Prefect's), leaves processes the worker no longer parents: killing
the workers and the zygote (worker_pool.shutdown) left them running after `raylite stop`.
Neither cgroups (privileged) nor process groups (a daemon calls setsid) hold them, so two
unprivileged marks do:

- a tag in the environment: the zygote sets `RAYLITE_NODE_PROCESS=<node pid>:<its start time>`,
  which every worker and everything they start inherit, double-forked daemons included;
- the zygote is a child subreaper (Linux), so an orphaned descendant is re-parented to it, not
  to init, and stays in its process tree even if it cleared its environment.

`kill_node_processes(tag, roots)` kills every process carrying the tag or below a root, again
until none is left (one may fork while the others die). The node calls it when it stops; the
CLI's `raylite stop` and a local driver's shutdown call it again after the node is gone, for
the case where the node was killed (`--force`, SIGKILL) and could not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

import psutil

TAG_VAR = "RAYLITE_NODE_PROCESS"
_PR_SET_CHILD_SUBREAPER = 36


def node_tag(pid: int) -> str:
    """The tag of the node daemon `pid` (its pid and start time: a reused pid gets another);
    "" when no such process runs."""
    try:
        return f"{pid}:{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return ""


def mark_zygote(node_pid: int) -> None:
    """In the zygote, before it forks a worker: tag the environment, become a subreaper."""
    tag = node_tag(node_pid)
    if tag:
        os.environ[TAG_VAR] = tag
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def node_processes(tag: str, roots: Iterable[int] = ()) -> list[int]:
    """Pids of this user's processes that carry `tag`, or descend from one of `roots` (which are
    included), never this process."""
    me, uid = os.getpid(), os.getuid() if hasattr(os, "getuid") else None
    roots = [r for r in roots if r]
    children: dict[int, list[int]] = {}
    tagged: set[int] = set()
    want = f"{TAG_VAR}={tag}".encode() if tag else None
    for proc in psutil.process_iter(["pid", "ppid", "uids"]):
        info = proc.info
        pid = info["pid"]
        if pid == me or (uid is not None and info["uids"] is not None and info["uids"].real != uid):
            continue
        children.setdefault(info["ppid"] or 0, []).append(pid)
        if want is not None and _environ_has(pid, want):
            tagged.add(pid)
    listed = {pid for kids in children.values() for pid in kids}
    below: set[int] = set()
    stack = [r for r in roots if r != me and r in listed]  # a root that is gone: its pid may be reused
    while stack:
        pid = stack.pop()
        if pid in below:
            continue
        below.add(pid)
        stack.extend(children.get(pid, ()))
    found = (tagged | below) - {me}
    return sorted(found)


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        if sys.platform.startswith("linux"):
            return False
    try:  # elsewhere (macOS): psutil reads it
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return False
    key, _, value = entry.decode().partition("=")
    return env.get(key) == value


def kill_node_processes(tag: str, roots: Iterable[int] = (), *, rounds: int = 20) -> int:
    """SIGKILL every process of `node_processes(tag, roots)`, again until none is left (at most
    `rounds` sweeps); the number of processes killed."""
    roots = list(roots)
    if not tag and not any(roots):
        return 0
    killed: set[int] = set()
    for _ in range(rounds):
        pids = [p for p in node_processes(tag, roots) if _alive(p)]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return len(killed)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False
