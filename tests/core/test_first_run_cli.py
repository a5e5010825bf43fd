"""A newcomer's CLI: `raylite --version`, and `raylite status` / `raylite memory` finding a
cluster that `ray.init()` started in another process (as `raylite list` and `raylite job
list` do), with no address given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import raylite

CLI = [sys.executable, "-m", "raylite.cli"]
DRIVER = """
import sys, raylite
raylite.init(num_cpus=1, include_dashboard=False)
ref = raylite.put(b"x" * 300_000)
print(ref.hex(), flush=True)
sys.stdin.readline()
"""


@pytest.fixture()
def driver_elsewhere():
    """Another process that ran `init()`; yields (env for the CLI, the hex id it holds)."""
    temp = tempfile.mkdtemp(prefix="rl-cli-", dir="/tmp")  # short: unix socket paths
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN"):
        env.pop(var, None)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        object_hex = proc.stdout.readline().strip()
        assert object_hex, "the driver did not start"
        yield env, object_hex
    finally:
        proc.stdin.close()
        proc.wait(60)
        shutil.rmtree(temp, ignore_errors=True)


def test_version():
    r = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"raylite {raylite.__version__}"


def test_status_and_memory_see_a_cluster_started_by_init_elsewhere(driver_elsewhere):
    env, object_hex = driver_elsewhere
    status = subprocess.run([*CLI, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "Active: 1" in status.stdout and "0/1 CPU" in status.stdout
    memory = subprocess.run([*CLI, "memory"], env=env, capture_output=True, text=True, timeout=60)
    assert memory.returncode == 0, memory.stderr
    assert object_hex in memory.stdout and "SHARED_MEMORY" in memory.stdout
    # Ray's spellings (its memory docs say `ray memory --stats-only`): totals only, in KiB
    stats = subprocess.run([*CLI, "memory", "--stats-only", "--units", "KB", "--num-entries", "5"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert object_hex not in stats.stdout and "objects" in stats.stdout and "in all" in stats.stdout
    assert "SHARED_MEMORY:" in stats.stdout and " KiB" in stats.stdout


def test_status_without_any_cluster_is_one_clear_line(tmp_path):
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path)}
    env.pop("RAYLITE_ADDRESS", None)
    r = subprocess.run([*CLI, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "raylite start --head" in r.stderr
    assert "Traceback" not in r.stderr
