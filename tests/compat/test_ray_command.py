"""The installed `ray` command (compat/ray's console script) is raylite's CLI: KubeRay runs
`ray start --head`, `ray status`, `ray stop` by that name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile

import psutil
import pytest

from tests.api_fixtures import free_port
from tests.conftest import process_gone, wait_for

from .conftest import REPO, requires_alias

pytestmark = requires_alias


def _ray_script() -> str:
    path = os.path.join(sysconfig.get_path("scripts"), "ray")
    if not os.path.exists(path):
        pytest.skip(f"no `ray` command in {os.path.dirname(path)}: pip install -e ./compat/ray")
    return path


@pytest.fixture()
def env():
    """The script's environment: this checkout's raylite, its own temp dir (no other cluster)."""
    temp = tempfile.mkdtemp(prefix="rlcompat-", dir="/tmp")  # short: unix socket paths
    out = {**os.environ, "RAYLITE_TEMP_DIR": temp, "PYTHONPATH": REPO}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN"):
        out.pop(var, None)
    yield out
    subprocess.run([_ray_script(), "stop"], env=out, capture_output=True, timeout=120)
    shutil.rmtree(temp, ignore_errors=True)


def _ray(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_ray_script(), *args], env=env, capture_output=True, text=True, timeout=120)


def test_help_and_version(env):
    help_ = _ray(env, "--help")
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith("Usage: ray ")
    for command in ("start", "stop", "status", "job", "list"):
        assert f"  {command} " in help_.stdout, command
    version = _ray(env, "--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("ray, version 2.60.0 (raylite ")


def test_start_head_status_stop_round_trip(env):
    port = free_port()
    started = _ray(env, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                   "--num-cpus=1", f"--dashboard-port={free_port()}")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("(pid ", 1)[1].split(",", 1)[0])
    assert psutil.pid_exists(pid)
    status = _ray(env, "status")
    assert status.returncode == 0, status.stderr
    assert f"127.0.0.1:{port}" in status.stdout and "0/1 CPU" in status.stdout
    stopped = _ray(env, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {pid}" in stopped.stdout
    wait_for(lambda: process_gone(pid), timeout_s=30, what=f"the head (pid {pid}) to exit")
    after = _ray(env, "status")
    assert after.returncode == 1 and "no running raylite cluster" in after.stderr
