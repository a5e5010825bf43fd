"""What a newcomer reads when something is off: resource amounts in GiB and without raylite's
internal names, one wording for an unschedulable task and actor, a typo'd option answered
with the option meant, a failed `raylite start` leaving no empty session, and the
dashboard-port warning pointing at the user's own line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import raylite as ray
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite.cli.state import _cell

REPO = Path(__file__).resolve().parents[2]


def test_amounts_read_as_a_person_reads_them():
    total = R.to_fixed({"CPU": 2, "memory": 17693193011.2, "object_store_memory": 7582797004,
                        "node:__internal_head__": 1, "GPU": 0.5})
    text = R.describe(total)
    assert text == "{CPU: 2, GPU: 0.5, memory: 16.48 GiB, object_store_memory: 7.06 GiB}", text
    assert R.describe(R.to_fixed({"memory": 3 * 2**20})) == "{memory: 3 MiB}"
    assert _cell({"CPU": 2.0, "memory": 17693193011.2, "node:127.0.0.1": 1.0}) == \
        "CPU:2,memory:16.48GiB,node:127.0.0.1:1"


def test_task_and_actor_say_the_same_about_an_impossible_request(cluster):
    @ray.remote(num_cpus=64, memory=3 * 2**30)
    def big():
        return 1

    @ray.remote(num_cpus=64, memory=3 * 2**30)
    class Big:
        def ping(self):
            return 1

    with pytest.raises(ray.exceptions.RayError) as task_err:
        ray.get(big.remote(), timeout=60)
    with pytest.raises(ray.exceptions.RayError) as actor_err:
        ray.get(Big.remote().ping.remote(), timeout=60)
    asked = "it requests {CPU: 64, memory: 3 GiB}, which no node of this cluster can ever provide"
    for err in (task_err.value, actor_err.value):
        text = str(err)
        assert asked in text, text
        assert S.FIX_HINT in text, text
        assert "__internal" not in text and "e+" not in text, text


def test_a_typod_option_is_answered_with_the_one_meant():
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="Did you mean 'num_cpus'\\?"):
        f.options(num_cpu=1)
    with pytest.raises(ValueError, match="Did you mean 'max_restarts'\\?"):
        @ray.remote(max_restart=2)
        class A:
            pass
    with pytest.raises(ValueError) as err:
        f.options(zzzz=1)
    assert "Did you mean" not in str(err.value)


def test_a_failed_start_leaves_no_empty_session(monkeypatch):
    from raylite._core import config as config_mod
    from raylite._core.cluster import cluster as C

    temp = tempfile.mkdtemp(prefix="rlfail", dir="/tmp")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        cfg = config_mod.get_config().replace(temp_dir=temp, token="")
        with pytest.raises(C.StartError, match="is in use"):
            C.start_node(cfg, head=True, port=busy.getsockname()[1], node_ip="127.0.0.1", num_cpus=1)
        assert [n for n in os.listdir(temp) if n.startswith("session_")] == []
    finally:
        busy.close()
        shutil.rmtree(temp, ignore_errors=True)


SCRIPT = """
import socket, sys
busy = socket.socket(); busy.bind(("127.0.0.1", 0)); busy.listen()
import os
os.environ["RAYLITE_DASHBOARD_PORT"] = str(busy.getsockname()[1])
import raylite as ray

@ray.remote
def f():
    return 1

ray.get(f.remote())  # THE USER'S LINE
"""


def test_the_port_in_use_warning_points_at_the_users_line(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    temp = tempfile.mkdtemp(prefix="rlwarn", dir="/tmp")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYLITE_TEMP_DIR": temp}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_DASHBOARD_PORT"):
        env.pop(var, None)
    try:
        proc = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert "prog.py:12: UserWarning: the dashboard port" in proc.stderr, proc.stderr
    assert "# THE USER'S LINE" in proc.stderr, proc.stderr
