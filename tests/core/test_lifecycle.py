"""init/shutdown: auto-init, re-init errors, resources, and no processes left behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psutil
import pytest

import raylite as ray
from tests.conftest import process_gone, wait_for


def _children_of(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_init_twice_and_resources():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=3, resources={"special": 2})
    try:
        with pytest.raises(RuntimeError, match="ignore_reinit_error"):
            ray.init()
        ray.init(ignore_reinit_error=True)
        res = ray.cluster_resources()
        assert res["CPU"] == 3 and res["special"] == 2
        nodes = ray.nodes()
        assert len(nodes) == 1 and nodes[0]["Alive"]
        with pytest.warns(UserWarning, match="ignores"):
            ray.shutdown()
            ray.init(num_cpus=1, _metrics_export_port=8080)  # dashboard_port is used now (issue 12)
        with pytest.raises(TypeError, match="unexpected keyword"):
            ray.shutdown()
            ray.init(not_a_ray_option=1)
    finally:
        ray.shutdown()


def test_failed_init_leaves_no_daemon_behind(tmp_path):
    """init() starts its daemon before checking every argument; a rejected call stops it."""
    if ray.is_initialized():
        ray.shutdown()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError, match="unexpected keyword"):
        ray.init(num_cpus=1, not_a_ray_option=1)
    wait_for(lambda: not {p.pid for p in psutil.Process().children(recursive=True)
                          if not process_gone(p.pid)} - before,
             what="the prestarted daemon to be stopped")
    ray.init(num_cpus=1, object_store_memory=300 * 1024 * 1024)  # and a correct call afterwards works
    try:
        assert ray.cluster_resources()["CPU"] == 1
        assert ray.cluster_resources()["object_store_memory"] == 300 * 1024 * 1024  # reported as Ray does
    finally:
        ray.shutdown()


def test_shutdown_leaves_no_processes():
    if ray.is_initialized():
        ray.shutdown()
    import os

    # children that earlier tests own (a session's S3 server, say) are not this cluster's
    before = {p.pid for p in _children_of(os.getpid())}
    ray.init(num_cpus=2)

    @ray.remote
    def f():
        return os.getpid()

    ray.get([f.remote() for _ in range(4)])
    procs = [p for p in _children_of(os.getpid()) if p.pid not in before]
    assert procs, "the local cluster runs in child processes"
    ray.shutdown()
    wait_for(lambda: all(process_gone(p.pid) for p in procs),
             what="cluster processes to exit")


def test_crashed_driver_leaves_no_processes(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        import raylite as ray
        ray.init(num_cpus=2)
        @ray.remote
        def f():
            return os.getpid()
        @ray.remote
        class A:
            def pid(self):
                return os.getpid()
        a = A.remote()
        pids = ray.get([f.remote() for _ in range(2)]) + [ray.get(a.pid.remote())]
        print(" ".join(map(str, pids)), flush=True)
        os._exit(3)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    wait_for(lambda: all(process_gone(p) for p in pids), timeout_s=15, what="workers of a crashed driver to exit")


def test_auto_init_on_first_call():
    if ray.is_initialized():
        ray.shutdown()

    @ray.remote
    def one():
        return 1

    try:
        assert ray.get(one.remote()) == 1
        assert ray.is_initialized()
    finally:
        ray.shutdown()
