"""Jobs that cannot start end FAILED with the reason; pip runtime_envs are installed, never
ignored; what a job carries is bounded (issue 17 §3 and §5)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(300)


def _wait_status(c, sid, timeout_s=120):
    return wait_for(lambda: (d := c.get(f"/api/jobs/{sid}").json())["status"] in ("SUCCEEDED", "FAILED", "STOPPED")
                    and d, timeout_s, 0.1, f"job {sid} to end")


def build_wheel(directory, name: str = "raylite_tinypkg", version: str = "0.1.0", value: int = 42) -> str:
    """A minimal pure-Python wheel, written here (no build tools, no network)."""
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{p},{digest(c.encode())},{len(c.encode())}\n" for p, c in files.items())
    path = os.path.join(str(directory), f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for p, c in files.items():
            z.writestr(p, c)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record + f"{name}-{version}.dist-info/RECORD,,\n")
    return path


def test_environment_too_large_for_exec_fails_the_job_with_the_reason(api):
    c = api.client()
    big = "x" * 200_000  # one variable over exec's 128 KiB per-string limit, under the job's cap
    sid = c.post("/api/jobs/", json={"entrypoint": "echo never", "runtime_env": {"env_vars": {"HUGE_VAR": big}}}
                 ).json()["submission_id"]
    d = _wait_status(c, sid, 60)
    assert d["status"] == "FAILED" and d["error_type"] == "JOB_ENTRYPOINT_COMMAND_START_ERROR", d
    assert "E2BIG" in d["message"] and "HUGE_VAR" in d["message"]
    assert "E2BIG" in c.get(f"/api/jobs/{sid}/logs").json()["logs"]
    assert c.post(f"/api/jobs/{sid}/stop").json() == {"stopped": False}  # it has ended
    assert c.delete(f"/api/jobs/{sid}").json() == {"deleted": True}


def test_oversized_runtime_env_metadata_or_entrypoint_is_refused_at_submit(api):
    c = api.client()
    r = c.post("/api/jobs/", json={"entrypoint": "echo", "runtime_env": {"env_vars": {"A": "y" * 300_000}}})
    assert r.status_code == 400 and "runtime_env is 293 KiB" in r.text and "working_dir" in r.text, r.text
    r = c.post("/api/jobs/", json={"entrypoint": "echo", "metadata": {"k": "v" * 20_000}})
    assert r.status_code == 400 and "metadata" in r.text and "16 KiB" in r.text, r.text
    r = c.post("/api/jobs/", json={"entrypoint": "echo " + "z" * 140_000})
    assert r.status_code == 400 and "entrypoint" in r.text, r.text
    r = c.post("/api/jobs/", json={"entrypoint": "echo", "runtime_env": {"pip": {"pakages": ["x"]}}})
    assert r.status_code == 400 and "unknown field" in r.text, r.text


def _raw_request(api, head: bytes, body: bytes = b"", timeout_s: float = 20.0) -> bytes:
    """Send a request head (and some body) on a raw socket; what the server answers before the
    timeout (the status line is all the tests need)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(api.url)
    with socket.create_connection((url.hostname, url.port), timeout=timeout_s) as s:
        s.sendall(head.replace(b"TOKEN", api.token.encode()) + body)
        try:
            return s.recv(4096)
        except TimeoutError:
            return b"(no answer)"


@pytest.mark.parametrize("path, method", [("/api/jobs/", b"POST"), ("/api/packages/gcs/_ray_pkg_big.zip", b"PUT")])
def test_a_declared_oversized_body_is_refused_before_it_is_read(api, path, method):
    """An authenticated client announcing 600 MiB gets 413 at once: the server does not wait
    for (or buffer) the body before it checks the size."""
    head = (method + b" " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer TOKEN\r\n"
            b"Content-Type: application/json\r\nContent-Length: 629145600\r\n\r\n")
    answer = _raw_request(api, head, b"{")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_chunked_submission_is_cut_off_at_its_limit(api):
    head = (b"POST /api/jobs/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer TOKEN\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * (1 << 20)
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(3))  # 3 MiB, never ended
    answer = _raw_request(api, head, body)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_listing_stays_small_when_a_job_carries_a_large_runtime_env(api):
    c = api.client()
    env = {"env_vars": {"BULKY": "b" * 100_000}}
    sid = c.post("/api/jobs/", json={"entrypoint": "true", "runtime_env": env}).json()["submission_id"]
    _wait_status(c, sid)
    listing = c.get("/api/jobs/")
    (row,) = [j for j in listing.json() if j["submission_id"] == sid]
    assert "_truncated" in row["runtime_env"] and sid in row["runtime_env"]["_truncated"]
    assert len(listing.content) < 64 * 1024 * max(1, len(listing.json()))  # no job's 100 KB repeated
    assert c.get(f"/api/jobs/{sid}").json()["runtime_env"]["env_vars"]["BULKY"] == env["env_vars"]["BULKY"]


DRIVER = """
import raylite, raylite_tinypkg
raylite.init(address="auto")

@raylite.remote
def in_a_task():
    import raylite_tinypkg
    return raylite_tinypkg.VALUE

print("driver sees", raylite_tinypkg.VALUE, "task sees", raylite.get(in_a_task.remote()))
"""


def test_pip_runtime_env_installs_into_a_cached_virtualenv(api, tmp_path):
    with pytest.raises(ImportError):
        import raylite_tinypkg  # noqa: F401 - the package is nowhere but in the job's environment
    wheel = build_wheel(tmp_path)
    (tmp_path / "driver.py").write_text(DRIVER)
    pip = {"packages": [wheel], "pip_install_options": ["--no-index"]}
    c = api.client()
    sid = c.post("/api/jobs/", json={"entrypoint": f"python {tmp_path / 'driver.py'}",
                                     "runtime_env": {"pip": pip}}).json()["submission_id"]
    d = _wait_status(c, sid, 240)
    logs = c.get(f"/api/jobs/{sid}/logs").json()["logs"]
    assert d["status"] == "SUCCEEDED", (d, logs)
    assert "driver sees 42 task sees 42" in logs
    from raylite._core.runtime_env import pip_env

    venv = pip_env.env_dir(os.path.dirname(api.session_dir), "pip", pip)
    ready = os.path.join(venv, pip_env.READY)
    assert os.path.exists(ready) and json.load(open(ready))["requirements"] == [wheel]
    built_at = os.stat(ready).st_mtime_ns
    # the same requirement list again: the environment is reused, not built again
    sid = c.post("/api/jobs/", json={"entrypoint": f"python {tmp_path / 'driver.py'}",
                                     "runtime_env": {"pip": pip}}).json()["submission_id"]
    assert _wait_status(c, sid, 240)["status"] == "SUCCEEDED"
    assert os.stat(ready).st_mtime_ns == built_at


def test_pip_install_failure_fails_the_job_with_pips_output(api):
    c = api.client()
    pip = {"packages": ["surely-not-a-real-package-xyz==1.0"], "pip_install_options": ["--no-index"]}
    sid = c.post("/api/jobs/", json={"entrypoint": "echo never", "runtime_env": {"pip": pip}}).json()["submission_id"]
    d = _wait_status(c, sid, 240)
    assert d["status"] == "FAILED" and d["error_type"] == "RUNTIME_ENV_SETUP_FAILED", d
    assert "surely-not-a-real-package-xyz" in d["message"] and "pip" in d["message"]


def test_requirements_the_base_python_has_need_no_virtualenv(api, tmp_path):
    c = api.client()
    code = "import os, sys; print('venv', os.environ.get('VIRTUAL_ENV'))"
    sid = c.post("/api/jobs/", json={"entrypoint": f'{sys.executable} -c "{code}"',
                                     "runtime_env": {"pip": ["msgpack", "numpy>=1.0"]}}).json()["submission_id"]
    assert _wait_status(c, sid)["status"] == "SUCCEEDED"
    # no job environment: the entrypoint runs in the cluster's own Python, a virtualenv when the
    # tests run in one (activated or not), else none
    in_venv = sys.prefix != sys.base_prefix
    assert f"venv {sys.prefix if in_venv else None}\n" in c.get(f"/api/jobs/{sid}/logs").json()["logs"]


@pytest.mark.parametrize("runtime_env", [{"no_such_key": 1}, {"conda": "env.yaml"}, {"pip": {"pakages": ["x"]}},
                                         {"env_vars": {"A": 1}}, {"pip": 7}])
def test_the_job_api_refuses_what_the_core_api_refuses_in_the_same_words(api, runtime_env):
    """One check for both doors: a runtime_env that init()/.options() refuse is a 400 at submit,
    with the same message, instead of a job that runs without it."""
    from raylite._runtime_env import merge_runtime_env

    with pytest.raises((ValueError, TypeError)) as core:
        merge_runtime_env(None, runtime_env)
    r = api.client().post("/api/jobs/", json={"entrypoint": "echo ran", "runtime_env": runtime_env})
    assert r.status_code == 400 and str(core.value) in r.text, (r.status_code, r.text, str(core.value))


def test_the_job_client_reports_an_unknown_runtime_env_field(api):
    from raylite.job_submission import JobSubmissionClient

    client = JobSubmissionClient(api.url, headers={"Authorization": f"Bearer {api.token}"})
    with pytest.raises(Exception, match=r"unknown runtime_env field\(s\) \['no_such_key'\]"):
        client.submit_job(entrypoint="echo ran", runtime_env={"no_such_key": 1})
    assert not [j for j in client.list_jobs() if j.entrypoint == "echo ran"]
