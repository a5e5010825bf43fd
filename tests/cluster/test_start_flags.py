"""`raylite start` takes every `ray start` flag: the meaningful ones act, the others say so."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import numpy as np
import pytest

import raylite as ray
from raylite._core import config as config_mod
from raylite._core.cluster.driver import query_cluster
from raylite.cli.ray_start_flags import FLAGS, parse_labels

from .conftest import free_port, wait_until


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raylite.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def dirs(monkeypatch):
    base = tempfile.mkdtemp(prefix="rlf", dir="/tmp")
    made = {name: os.path.join(base, name) for name in ("env_temp", "flag_temp", "spill")}
    env = dict(os.environ, RAYLITE_TEMP_DIR=made["env_temp"])
    env.pop("RAYLITE_TOKEN", None)
    made["env"] = env
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        _cli(dict(env, RAYLITE_TEMP_DIR=made["flag_temp"]), "stop")
        shutil.rmtree(base, ignore_errors=True)


def test_ray_start_flags_act_or_say_they_do_nothing(dirs, monkeypatch, tmp_path):
    port, node_port, agent_port, metrics_port = free_port(), free_port(), free_port(), free_port()
    labels_file = tmp_path / "labels.yaml"
    labels_file.write_text("zone: z1\n")
    out = _cli(dirs["env"], "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--num-cpus=1", "--object-store-memory=60000000",
               # meaningful here
               "--memory=123456789", "--labels=region=us-west,tier=a", f"--labels-file={labels_file}",
               f"--temp-dir={dirs['flag_temp']}", f"--object-spilling-directory={dirs['spill']}",
               f"--node-manager-port={node_port}", "-v", f"--dashboard-agent-listen-port={agent_port}",
               f"--metrics-export-port={metrics_port}",
               # accepted, no effect
               "--disable-usage-stats", "--include-dashboard=false", "--min-worker-port=10002",
               "--max-worker-port=19999", "--log-style=record",
               "--log-color=false", "--system-config={}", "--storage=/tmp/x", "--ray-client-server-port=0",
               "--runtime-env-agent-port=1234")
    assert out.returncode == 0, out.stderr
    for flag in ("--disable-usage-stats", "--min-worker-port", "--log-style", "--system-config", "--storage"):
        assert f"Note: {flag} has no effect in raylite" in out.stderr, out.stderr
    assert "--memory" not in out.stderr and "--labels" not in out.stderr
    # the node's health server (KubeRay's probes) and metrics port
    with urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/api/local_raylet_healthz", timeout=10) as r:
        assert r.read() == b"success"
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    # --temp-dir: the session lives there, not in RAYLITE_TEMP_DIR
    assert glob.glob(os.path.join(dirs["flag_temp"], "session_*")) and not os.path.exists(dirs["env_temp"])
    token = open(glob.glob(os.path.join(dirs["flag_temp"], "session_*", "token"))[0]).read()
    (node,) = query_cluster(f"127.0.0.1:{port}", token)
    # the --labels given, and Ray's built-in node id label every node carries
    assert node["labels"] == {"region": "us-west", "tier": "a", "zone": "z1", "ray.io/node-id": node["node_id"].hex()}
    assert node["address"] == f"tcp://127.0.0.1:{node_port}"
    # a driver sees the memory resource, and a full store spills into --object-spilling-directory
    monkeypatch.setattr(config_mod, "_CONFIG", config_mod.get_config().replace(temp_dir=dirs["flag_temp"]))
    ray.init(address="auto")
    assert ray.cluster_resources()["memory"] == 123456789
    refs = [ray.put(np.full(2_500_000, i, dtype=np.uint64)) for i in range(4)]  # 20 MB each
    wait_until(lambda: glob.glob(os.path.join(dirs["spill"], "spill_*", "*")), 20, "spilled objects")
    assert [int(ray.get(r)[0]) for r in refs] == [0, 1, 2, 3]
    ray.shutdown()


def test_bad_label_syntax_is_a_clear_error(dirs):
    out = _cli(dirs["env"], "start", "--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1",
               "--labels=region")
    assert out.returncode != 0 and "key=value" in out.stderr and "Traceback" not in out.stderr


def test_a_taken_node_manager_port_is_one_clear_error(dirs):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _cli(dirs["env"], "start", "--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1",
                   f"--node-manager-port={port}")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot listen on 127.0.0.1:{port} for this node" in out.stderr, out.stderr


def test_the_nodes_own_port_is_held_from_the_moment_it_is_chosen():
    """A node picks its TCP port by binding it (port 0), never by probing for a free one and
    binding it later (another process could take it meanwhile, as happened in a loaded test run):
    the port is held before anyone listens on it, even against SO_REUSEADDR."""
    from raylite._core.cluster import daemon as node_main

    sock = node_main._bound_tcp_socket("127.0.0.1", 0)
    try:
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                other.bind(sock.getsockname())
    finally:
        sock.close()


def test_flag_table_covers_rays_start_flags():
    flags = {f for f, _k, _e in FLAGS}
    # the flags of `ray start` (Ray 2.x) that the start command does not declare itself
    for name in ("--disable-usage-stats", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--metrics-export-port", "--min-worker-port",
                 "--max-worker-port", "--worker-port-list", "--object-manager-port", "--node-manager-port",
                 "--redis-password", "--redis-username", "--temp-dir", "--storage", "--system-config",
                 "--labels", "--labels-file", "--runtime-env-agent-port", "--ray-client-server-port",
                 "--log-style", "--log-color", "--verbose", "--plasma-directory",
                 "--object-spilling-directory", "--memory", "--autoscaling-config", "--no-redirect-output",
                 "--enable-object-reconstruction", "--ray-debugger-external", "--include-log-monitor",
                 "--enable-resource-isolation", "--system-reserved-cpu", "--system-reserved-memory",
                 "--cgroup-path", "--proxy-server-url", "--node-name", "--redis-shard-ports",
                 "--no-monitor", "--tracing-startup-hook", "--gcs-server-port"):
        assert name in flags, name
    assert parse_labels("a=1, b = two", "--labels") == {"a": "1", "b": "two"}
    assert parse_labels(json.dumps({"a": 1}), "--labels") == {"a": "1"}


def test_every_flag_that_acts_says_what_it_does():
    """A flag with an effect has its own help text (`--ray-client-server-port` once read
    "Accepted for Ray compatibility." though it sets the Ray Client port), and no help text
    denies a part raylite has."""
    from raylite.cli.ray_start_flags import _HELP

    for flag, _kind, effect in FLAGS:
        if callable(effect):
            assert _HELP.get(flag), f"{flag} changes the node but has no help text"
        else:
            assert "no Ray Client" not in effect and "no autoscaler" not in effect, (flag, effect)
