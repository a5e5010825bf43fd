"""Kill the engine's helper processes when the replica that owns them dies.

vLLM runs its engine core (and on CPUs a worker) in child processes. When a replica is
killed outright (raylite.shutdown(), a lost node, SIGKILL) nothing runs in it to stop them,
and they would live on holding the model and the KV cache (seen: orphaned `VLLM::EngineCore`
processes with 700 MB each). So the replica starts this small watcher, which has nothing
but the standard library to import: it polls the replica's pid and, once it is gone,
terminates the children it was given, then kills those that remain.
"""

from __future__ import annotations

import os
import subprocess
import sys

_WATCHER = r"""
import os, signal, sys, time
owner, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
while alive(owner) and os.getppid() == owner:
    time.sleep(1.0)
for sig in (signal.SIGTERM, signal.SIGKILL):
    live = [p for p in pids if alive(p)]
    for p in live:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [p for p in live if alive(p)]
"""


def watch_children(owner_pid: int | None = None) -> subprocess.Popen | None:
    """Start a watcher for this process's current children (recursively); None if none."""
    import psutil

    owner = psutil.Process(owner_pid or os.getpid())
    pids = [str(c.pid) for c in owner.children(recursive=True)]
    if not pids:
        return None
    return subprocess.Popen([sys.executable, "-S", "-c", _WATCHER, str(owner.pid), *pids],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
