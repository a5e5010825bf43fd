"""Tokens from the environment, as KubeRay gives them to every pod (RAY_AUTH_MODE=token,
RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), and RAY_AUTH_MODE=disabled, refused unless
RAYLITE_ALLOW_NO_AUTH=1. Each node has its own temp dir: a pod cannot read the head's files."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import httpx
import pytest

from raylite._core.cluster.driver import query_cluster

from .conftest import free_port

DRIVER = ("import raylite; raylite.init(address='{address}'); "
          "print('sum', sum(raylite.get([raylite.remote(lambda x: x * 2).remote(i) for i in range(4)])))")


@pytest.fixture
def pods():
    """Environments of separate 'pods' (own temp dirs, no RAYLITE_TOKEN), stopped afterwards."""
    base = tempfile.mkdtemp(prefix="rlauth", dir="/tmp")
    made: list[dict] = []

    def pod(**extra: str) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RAYLITE_TOKEN", "RAYLITE_ADDRESS", "RAY_ADDRESS") and not k.startswith("RAY_AUTH")}
        env.update(RAYLITE_TEMP_DIR=os.path.join(base, f"pod{len(made)}"), **extra)
        made.append(env)
        return env

    try:
        yield pod
    finally:
        for env in made:
            _cli(env, "stop")
        shutil.rmtree(base, ignore_errors=True)


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raylite.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _start_head(env: dict, port: int, api_port: int) -> subprocess.CompletedProcess:
    return _cli(env, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                f"--dashboard-port={api_port}")


def _join(env: dict, port: int) -> subprocess.CompletedProcess:
    return _cli(env, "start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1")


def _token_file(env: dict) -> str:
    with open(os.path.join(env["RAYLITE_TEMP_DIR"], "session_latest", "token")) as f:
        return f.read().strip()


def test_head_node_driver_and_api_take_the_token_from_the_environment(pods):
    token = secrets.token_hex(16)
    port, api_port = free_port(), free_port()
    head = pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    out = _start_head(head, port, api_port)
    assert out.returncode == 0, out.stderr
    assert _token_file(head) == token  # the env token is the cluster's, none was generated
    assert "with RAY_AUTH_TOKEN set as here" in out.stdout

    worker = pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # cannot read the head's token file
    out = _join(worker, port)
    assert out.returncode == 0, out.stderr
    assert [n["alive"] for n in query_cluster(f"127.0.0.1:{port}", token)] == [True, True]

    driver = subprocess.run([sys.executable, "-c", DRIVER.format(address=f"127.0.0.1:{port}")],
                            env=pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token), capture_output=True,
                            text=True, timeout=120)
    assert "sum 12" in driver.stdout, driver.stderr

    r = httpx.get(f"http://127.0.0.1:{api_port}/api/version", headers={"x-ray-authorization": f"Bearer {token}"},
                  timeout=60)
    assert r.status_code == 200
    cli = _cli(pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_ADDRESS=f"http://127.0.0.1:{api_port}"),
               "list", "nodes")
    assert cli.returncode == 0 and cli.stdout.count("ALIVE") == 2, cli.stderr

    # the same variables with another token: refused, naming where the token comes from
    out = _join(pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="wrong-" + token), port)
    assert out.returncode != 0 and "RAY_AUTH_TOKEN" in out.stderr
    # RAY_AUTH_TOKEN without RAY_AUTH_MODE=token is ignored, as in Ray: no token, refused
    out = _join(pods(RAY_AUTH_TOKEN=token), port)
    assert out.returncode != 0 and "token" in out.stderr
    assert len(query_cluster(f"127.0.0.1:{port}", token)) == 2


def test_token_path_and_bad_values(pods, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(secrets.token_hex(16) + "\n")
    port, api_port = free_port(), free_port()
    head = pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    out = _start_head(head, port, api_port)
    assert out.returncode == 0, out.stderr
    assert _token_file(head) == token_file.read_text().strip()

    missing = _start_head(pods(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(tmp_path / "nope")),
                          free_port(), free_port())
    assert missing.returncode != 0 and "RAY_AUTH_TOKEN_PATH" in missing.stderr
    unknown = _start_head(pods(RAY_AUTH_MODE="tokens"), free_port(), free_port())
    assert unknown.returncode != 0 and "RAY_AUTH_MODE='tokens'" in unknown.stderr


def test_auth_disabled_is_refused_unless_explicitly_allowed(pods):
    port, api_port = free_port(), free_port()
    closed = pods(RAY_AUTH_MODE="disabled")
    refused = _start_head(closed, port, api_port)
    assert refused.returncode != 0 and "RAYLITE_ALLOW_NO_AUTH=1" in refused.stderr
    assert not glob.glob(os.path.join(closed["RAYLITE_TEMP_DIR"], "session_*"))  # nothing started

    open_env = {"RAY_AUTH_MODE": "disabled", "RAYLITE_ALLOW_NO_AUTH": "1"}
    head = pods(**open_env)
    out = _start_head(head, port, api_port)
    assert out.returncode == 0 and "WITHOUT authentication" in out.stderr, out.stderr
    assert _join(pods(**open_env), port).returncode == 0
    assert httpx.get(f"http://127.0.0.1:{api_port}/api/version", timeout=60).status_code == 200
    assert _join(pods(), port).returncode != 0  # a node not told that auth is off has no token to give
