"""Session directories: kept after shutdown, oldest stopped ones pruned, live ones never."""

import os
import subprocess
import sys
import time

from raylite._core.cluster import sessions


def make(base, name, age_s, live=False):
    path = base / name
    (path / "logs").mkdir(parents=True)
    (path / "logs" / "node.err").write_text("x")
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_prune_keeps_the_newest_stopped_sessions_and_every_live_one(tmp_path):
    old = [make(tmp_path, f"session_{i}", 100 - i) for i in range(5)]
    live = make(tmp_path, "session_live", 1000)
    (live / "sockets").mkdir()  # still starting: no pid file yet, but sockets
    removed = sessions.prune(str(tmp_path), 2)
    assert sorted(removed) == sorted(str(p) for p in old[:3])
    assert all(p.exists() for p in old[3:]) and live.exists()


def test_pid_file_of_a_dead_process_means_stopped(tmp_path):
    s = make(tmp_path, "session_a", 10)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    (s / sessions.PID_FILE).write_text(str(proc.pid))
    assert not sessions.is_live(str(s))
    (s / sessions.PID_FILE).write_text(str(os.getpid()))  # alive, but not a node daemon
    assert not sessions.is_live(str(s))


def test_retire_keeps_logs_and_mark_live_links_latest(tmp_path):
    s = make(tmp_path, "session_b", 0)
    for name in ("sockets", "runtime_resources", "spill_1234"):
        (s / name).mkdir()
    (s / "token").write_text("secret")
    sessions.mark_live(str(s))
    assert os.readlink(tmp_path / sessions.LATEST) == "session_b"
    sessions.retire(str(s))
    assert sorted(os.listdir(s)) == ["logs"]
