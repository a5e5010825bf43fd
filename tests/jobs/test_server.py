"""The API server process: port errors, on/off, dying with the cluster, a dead supervisor, auth off
loopback, job records across a head restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest

import raylite
from tests.api_fixtures import free_port, start_api_cluster
from tests.conftest import process_gone, wait_for

pytestmark = pytest.mark.timeout(240)


def _server_pids(session_dir: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "raylite.dashboard.server" in cmd and session_dir in cmd:
            out.append(p.pid)
    return out


def test_explicit_port_in_use_is_an_error_naming_dashboard_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"dashboard port {port}.*dashboard_port="):
            raylite.init(num_cpus=1, dashboard_port=port)
    assert not raylite.is_initialized()


def test_default_port_in_use_falls_back_with_a_warning(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = ("import warnings, raylite; warnings.simplefilter('always'); ctx = raylite.init(num_cpus=1); "
                "print('URL', ctx.dashboard_url); raylite.shutdown()")
        env = {**os.environ, "RAYLITE_DASHBOARD_PORT": str(port)}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"port {port} on 127.0.0.1 is in use" in r.stderr and "dashboard_port=" in r.stderr
    url = r.stdout.split("URL ", 1)[1].strip().split("/?token=")[0]
    assert url.startswith("127.0.0.1:") and not url.endswith(f":{port}")


def test_include_dashboard_false_binds_nothing():
    ctx = raylite.init(num_cpus=1, include_dashboard=False)
    try:
        assert ctx.dashboard_url is None
        assert not os.path.exists(os.path.join(ctx["session_dir"], "dashboard_url"))
    finally:
        raylite.shutdown()


def test_server_starts_on_first_request_and_dies_with_the_cluster():
    api = start_api_cluster(num_cpus=1)
    try:
        assert _server_pids(api.session_dir) == []  # nothing is paid until the API is used
        assert httpx.get(api.url + "/api/version", headers=api.headers, timeout=60).status_code == 200
        pids = _server_pids(api.session_dir)
        assert len(pids) == 1
    finally:
        raylite.shutdown()
    wait_for(lambda: process_gone(pids[0]),
             20, 0.05, "the API server to exit with the cluster")
    # the session's logs stay, the rest goes
    assert os.path.exists(os.path.join(api.session_dir, "logs", "dashboard.log"))
    assert not os.path.exists(os.path.join(api.session_dir, "sockets"))
    latest = os.path.join(os.path.dirname(api.session_dir), "session_latest")
    assert os.path.islink(latest)


def test_a_job_whose_supervisor_died_is_failed_not_running_forever():
    api = start_api_cluster(num_cpus=1)
    try:
        c = api.client()
        sid = c.post("/api/jobs/", json={"entrypoint": "sleep 300"}).json()["submission_id"]
        wait_for(lambda: c.get(f"/api/jobs/{sid}").json()["status"] == "RUNNING", 60, 0.1, "the job to run")
        entry_pid = c.get(f"/api/jobs/{sid}").json()  # noqa: F841  (record kept for the message below)
        (server,) = _server_pids(api.session_dir)
        os.kill(server, signal.SIGKILL)  # the supervisor crashes
        wait_for(lambda: not _server_pids(api.session_dir), 20, 0.05, "the server to be gone")
        # the next request starts a new server, which finds the orphaned record
        d = wait_for(lambda: (d := api.client().get(f"/api/jobs/{sid}").json())["status"] != "RUNNING" and d,
                     60, 0.2, "the job to leave RUNNING")
        assert d["status"] == "FAILED" and d["error_type"] == "JOB_SUPERVISOR_DIED"
        assert "supervisor" in d["message"]
    finally:
        raylite.shutdown()


def _non_loopback_ip() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


@pytest.fixture
def short_tmp():
    """A short temp dir: unix socket paths under pytest's tmp_path are too long."""
    import pathlib
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="rl", dir="/tmp")
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _start_head(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path / "t")}
    return subprocess.run([sys.executable, "-m", "raylite.cli", "start", "--head", "--port", str(free_port()),
                           "--num-cpus", "1", *args], capture_output=True, text=True, env=env, timeout=120)


def _stop(tmp_path) -> None:
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path / "t")}
    subprocess.run([sys.executable, "-m", "raylite.cli", "stop"], capture_output=True, env=env, timeout=60)


def test_start_head_port_in_use_names_the_flag(short_tmp):
    tmp_path = short_tmp
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = _start_head(tmp_path, "--dashboard-port", str(port))
    _stop(tmp_path)
    assert r.returncode == 1
    assert f"dashboard port {port}" in r.stderr and "--dashboard-port" in r.stderr


def test_off_loopback_nothing_is_accepted_without_the_token(short_tmp):
    tmp_path = short_tmp
    ip = _non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    port = free_port()
    marker = tmp_path / "ran"
    r = _start_head(tmp_path, "--dashboard-host", "0.0.0.0", "--dashboard-port", str(port))
    try:
        assert r.returncode == 0, r.stderr
        url = f"http://{ip}:{port}"
        bad = httpx.post(url + "/api/jobs/", json={"entrypoint": f"touch {marker}"}, timeout=60)
        assert bad.status_code == 401
        assert httpx.get(url + "/api/jobs/", timeout=60).status_code == 401
        token = open(next((tmp_path / "t").glob("session_*/token"))).read().strip()
        good = httpx.get(url + "/api/jobs/", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert good.status_code == 200 and good.json() == []
        time.sleep(0.5)
        assert not marker.exists()
    finally:
        _stop(tmp_path)


@pytest.mark.slow
def test_job_records_survive_a_head_restart_with_persistence(short_tmp):
    tmp_path = short_tmp
    db = tmp_path / "state.db"
    port = free_port()
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path / "t")}
    env.pop("RAY_ADDRESS", None)
    r = _start_head(tmp_path, "--persist", f"sqlite:{db}", "--dashboard-port", str(port))
    assert r.returncode == 0, r.stderr
    try:
        cli = [sys.executable, "-m", "raylite.cli", "job"]
        addr = ["--address", f"http://127.0.0.1:{port}"]
        code = "import raylite; raylite.init(address='auto'); print('persisted', raylite.get(raylite.put(7)))"
        out = subprocess.run([*cli, "submit", *addr, "--submission-id", "kept", "--", sys.executable, "-c",
                              code], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0 and "persisted 7" in out.stdout, out.stdout + out.stderr
    finally:
        _stop(tmp_path)
    r = _start_head(tmp_path, "--persist", f"sqlite:{db}", "--dashboard-port", str(port))
    try:
        assert r.returncode == 0, r.stderr
        out = subprocess.run([*cli, "status", *addr, "kept"], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0 and "SUCCEEDED" in out.stdout, out.stdout + out.stderr
        # its log is in the earlier session's directory, and still served
        out = subprocess.run([*cli, "logs", *addr, "kept"], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0 and "persisted 7" in out.stdout, out.stdout + out.stderr
    finally:
        _stop(tmp_path)
