"""creator_watch: a daemon notices its creator *process* exiting (pidfd, or polling without one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from tests.conftest import process_gone, wait_for

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the "creator" starts a watcher child from a short-lived thread, then waits to be killed
_CREATOR = textwrap.dedent("""
    import os, subprocess, sys, threading, time
    box = []
    argv = [sys.executable, "-c", WATCHER, str(os.getpid())]
    t = threading.Thread(target=lambda: box.append(subprocess.Popen(argv)))
    t.start(); t.join()          # the thread that made the watcher is gone: it must keep watching
    print(box[0].pid, flush=True)
    time.sleep(600)
""")

_WATCHER = textwrap.dedent("""
    import asyncio, os, sys
    from raylite._core.cluster import creator_watch
    if {no_pidfd}:
        del os.pidfd_open  # the polling fallback
    async def main():
        done = asyncio.get_running_loop().create_future()
        creator_watch.watch_creator(asyncio.get_running_loop(), int(sys.argv[1]), lambda: done.set_result(1))
        await done
    asyncio.run(main())
""")


@pytest.mark.parametrize("no_pidfd", [False, True])
def test_watcher_outlives_the_creating_thread_and_exits_with_the_creator(no_pidfd):
    env = dict(os.environ, PYTHONPATH=_ROOT)
    code = f"WATCHER = {_WATCHER.format(no_pidfd=no_pidfd)!r}\n" + _CREATOR
    creator = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        watcher = psutil.Process(int(creator.stdout.readline()))
        assert watcher.is_running() and watcher.status() != psutil.STATUS_ZOMBIE
    finally:
        creator.send_signal(signal.SIGKILL)
        creator.wait(10)
    wait_for(lambda: process_gone(watcher.pid),
             timeout_s=20, what="the watcher to exit with its creator")
