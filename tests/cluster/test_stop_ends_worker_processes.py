"""`raylite stop` (graceful and --force) and a local cluster's end with its driver end every
process a worker started: a plain child (`sleep 600`) and a daemon that double-forks and
calls setsid (as Prefect's server does), which once outlived the cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from .conftest import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]

# A driver whose tasks start a `sleep 600` and a double-forked daemon; prints their pids.
DRIVER = textwrap.dedent('''
    import os, subprocess, sys, time
    import raylite as ray

    address = None if sys.argv[1] == "local" else sys.argv[1]
    ray.init(address=address, num_cpus=None if address else 2, include_dashboard=False)

    @ray.remote
    def start_sleep():
        return subprocess.Popen(["sleep", "600"]).pid

    DAEMON = (
        "import os, sys, time\\n"
        "if os.fork(): os._exit(0)\\n"
        "os.setsid()\\n"
        "if os.fork(): os._exit(0)\\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\\n"
        "time.sleep(600)\\n"
    )

    @ray.remote
    def start_daemon(path):
        subprocess.run([sys.executable, "-c", DAEMON, path], check=True)
        for _ in range(500):
            if os.path.exists(path) and open(path).read():
                return int(open(path).read())
            time.sleep(0.01)
        raise RuntimeError("the daemon did not start")

    pids = ray.get([start_sleep.remote(), start_daemon.remote(sys.argv[2])])
    print(" ".join(map(str, pids)), flush=True)
    if address is None:
        sys.stdin.readline()  # the local cluster lives until this driver is told to end
        ray.shutdown() if os.environ.get("SHUTDOWN") else None
''')


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def env():
    temp = tempfile.mkdtemp(prefix="rlstop", dir="/tmp")
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp, "PYTHONPATH": str(REPO)}
    for var in ("RAYLITE_TOKEN", "RAYLITE_ADDRESS", "RAY_ADDRESS"):
        env.pop(var, None)
    left: list[int] = []
    try:
        yield env, temp, left
    finally:
        subprocess.run([sys.executable, "-m", "raylite.cli", "stop", "--force"], env=env, capture_output=True,
                       timeout=60)
        for pid in left:  # never leave a sleeper behind, whatever the test found
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _pids_from(proc: subprocess.Popen) -> list[int]:
    line = proc.stdout.readline()
    assert line.strip(), proc.stderr.read() if proc.poll() is not None else "the driver printed nothing"
    return [int(x) for x in line.split()]


@pytest.mark.parametrize("force", [False, True], ids=["stop", "stop-force"])
def test_raylite_stop_ends_what_workers_started(env, force, tmp_path):
    env, temp, left = env
    port = free_port()
    start = subprocess.run([sys.executable, "-m", "raylite.cli", "start", "--head", f"--port={port}",
                            "--node-ip-address=127.0.0.1", "--num-cpus=2", "--include-dashboard=false",
                            "--ray-client-server-port=0"], env=env, capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stderr
    driver = subprocess.run([sys.executable, "-c", DRIVER, f"127.0.0.1:{port}", str(tmp_path / "daemon.pid")],
                            env=env, capture_output=True, text=True, timeout=120)
    assert driver.returncode == 0, driver.stderr
    pids = [int(x) for x in driver.stdout.split()]
    left.extend(pids)
    assert len(pids) == 2 and not any(_gone(p) for p in pids)
    stop = subprocess.run([sys.executable, "-m", "raylite.cli", "stop", *(["--force"] if force else [])],
                          env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    wait_until(lambda: all(_gone(p) for p in pids), 20, "the sleeper and the daemon to end")


@pytest.mark.parametrize("how", ["shutdown", "sigkill"])  # a plain exit ends it as a SIGKILL does: the node sees its creator go
def test_local_cluster_end_ends_what_workers_started(env, how, tmp_path):
    env, temp, left = env
    run_env = dict(env, SHUTDOWN="1") if how == "shutdown" else env
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, "local", str(tmp_path / "daemon.pid")], env=run_env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = _pids_from(proc)
        left.extend(pids)
        assert not any(_gone(p) for p in pids)
        if how == "sigkill":
            proc.kill()
        else:
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(60)
        wait_until(lambda: all(_gone(p) for p in pids), 30, "the sleeper and the daemon to end")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
