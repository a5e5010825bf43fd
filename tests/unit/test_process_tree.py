"""process_tree: a node's processes are found by their environment tag or below a root, and
killed until none is left; processes without the tag, or of other trees, are left alone."""

from __future__ import annotations

import os
import subprocess
import time

import psutil

from raylite._core.node import process_tree as PT


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_tagged_and_descendant_processes_are_found_and_killed():
    tag = f"test-{os.getpid()}-{time.time_ns()}"
    tagged = subprocess.Popen(["sleep", "60"], env={**os.environ, PT.TAG_VAR: tag})
    root = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])  # a child of its own, untagged
    other = subprocess.Popen(["sleep", "60"])  # neither tagged nor below the root
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(root.pid).children() and time.monotonic() < deadline:
            time.sleep(0.01)
        grandchild = psutil.Process(root.pid).children()[0].pid
        found = PT.node_processes(tag, [root.pid])
        assert {tagged.pid, root.pid, grandchild} <= set(found)
        assert other.pid not in found and os.getpid() not in found
        assert PT.kill_node_processes(tag, [root.pid]) >= 3
        tagged.wait(10)
        root.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(grandchild) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _gone(grandchild) and other.poll() is None
    finally:
        for p in (tagged, root, other):
            p.kill()
            p.wait()


def test_a_root_that_is_gone_is_not_a_pid_to_kill():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert gone.pid not in PT.node_processes("", [gone.pid])
    assert PT.node_tag(gone.pid) == ""
    assert PT.node_tag(os.getpid()).startswith(f"{os.getpid()}:")
