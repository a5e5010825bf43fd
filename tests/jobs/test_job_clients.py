"""raylite.job_submission.JobSubmissionClient, the `raylite job` CLI, and Ray's own client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from raylite.job_submission import JobDetails, JobStatus, JobSubmissionClient
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(240)
RAY_PYTHON = "/opt/rayvenv/bin/python"

DRIVER = """
import os, raylite
import helper
raylite.init(address="auto")
@raylite.remote
def remote_helper():
    import helper  # the job's working_dir reaches the workers too
    return helper.VALUE, os.environ.get("GREETING")
print("driver", helper.VALUE, raylite.get(remote_helper.remote()))
"""


@pytest.fixture
def working_dir(tmp_path):
    (tmp_path / "main.py").write_text(DRIVER)
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    return tmp_path


def _wait_terminal(client, sid, timeout_s=90):
    return wait_for(lambda: client.get_job_status(sid).is_terminal() and client.get_job_info(sid),
                    timeout_s, 0.1, f"job {sid} to end")


def test_python_client_working_dir_env_and_tail(api, working_dir):
    client = JobSubmissionClient(api.url)  # the token is found from the running cluster
    sid = client.submit_job(entrypoint="python main.py",
                            runtime_env={"working_dir": str(working_dir), "env_vars": {"GREETING": "hello"}},
                            submission_id="client-job-1")
    assert sid == "client-job-1"

    async def tail() -> str:
        return "".join([chunk async for chunk in client.tail_job_logs(sid)])

    streamed = asyncio.run(asyncio.wait_for(tail(), 120))
    assert "driver 41 (41, 'hello')" in streamed
    info = _wait_terminal(client, sid)
    assert isinstance(info, JobDetails) and info.status == JobStatus.SUCCEEDED
    assert info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")
    assert "driver 41" in client.get_job_logs(sid)
    assert sid in [j.submission_id for j in client.list_jobs()]
    with pytest.raises(RuntimeError, match="client-job-1"):
        client.stop_job("client-job-1") and None
        client.delete_job(sid)
        client.get_job_info(sid)


def test_python_client_stop_and_errors(api):
    client = JobSubmissionClient(api.url)
    sid = client.submit_job(entrypoint="sleep 120")
    wait_for(lambda: client.get_job_status(sid) == JobStatus.RUNNING, 60, 0.1, "the job to run")
    assert client.stop_job(sid) is True
    assert _wait_terminal(client, sid).status == JobStatus.STOPPED
    with pytest.raises(RuntimeError, match="raysubmit_unknown"):
        client.get_job_info("raysubmit_unknown")
    with pytest.raises(PermissionError, match="RAYLITE_TOKEN=<token> or RAY_AUTH_TOKEN=<token> with RAY_AUTH_MODE=token"):
        JobSubmissionClient(api.url, headers={"Authorization": "Bearer wrong"})


def test_working_dir_over_the_limit_is_refused_before_submission(api, tmp_path, monkeypatch):
    from raylite._core.runtime_env import packaging

    (tmp_path / "big.bin").write_bytes(b"x" * 4096)
    monkeypatch.setattr(packaging, "MAX_PACKAGE_BYTES", 1024)
    client = JobSubmissionClient(api.url)
    before = {j.submission_id for j in client.list_jobs()}
    with pytest.raises(packaging.PackageTooLargeError, match="1 MiB|0 MiB|limit|more than"):
        client.submit_job(entrypoint="echo", runtime_env={"working_dir": str(tmp_path)})
    assert {j.submission_id for j in client.list_jobs()} <= before  # nothing new was submitted


def test_job_outlives_the_submitting_client(api, tmp_path):
    marker = tmp_path / "done"
    code = ("from raylite.job_submission import JobSubmissionClient; import sys; "
            f"print(JobSubmissionClient({api.url!r}).submit_job(entrypoint='sleep 1 && touch {marker}'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=api.env(), timeout=60)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip().splitlines()[-1]
    client = JobSubmissionClient(api.url)
    assert _wait_terminal(client, sid).status == JobStatus.SUCCEEDED  # its client exited long before
    assert marker.exists()


def test_cli_submit_status_logs_stop_list(api, working_dir):
    r = api.cli("job", "submit", "--working-dir", str(working_dir), "--runtime-env-json",
                '{"env_vars": {"GREETING": "cli"}}', "--", "python", "main.py")
    assert r.returncode == 0, r.stderr
    assert "driver 41 (41, 'cli')" in r.stdout and "succeeded" in r.stdout

    r = api.here("job", "submit", "--no-wait", "--submission-id", "cli-sleeper", "--", "sleep", "120")
    assert r.returncode == 0 and "cli-sleeper" in r.stdout
    client = JobSubmissionClient(api.url)
    wait_for(lambda: client.get_job_status("cli-sleeper") == JobStatus.RUNNING, 60, 0.1, "the job to run")
    r = api.here("job", "status", "cli-sleeper")
    assert r.returncode == 0 and "RUNNING" in r.stdout
    r = api.here("job", "stop", "cli-sleeper")
    assert r.returncode == 0 and "STOPPED" in r.stdout
    r = api.here("job", "list", "--format", "json")
    rows = {j["submission_id"]: j for j in json.loads(r.stdout)}
    assert rows["cli-sleeper"]["status"] == "STOPPED"
    r = api.here("job", "delete", "cli-sleeper")
    assert r.returncode == 0
    r = api.here("job", "logs", "cli-sleeper")
    assert r.returncode == 1 and "cli-sleeper" in r.stderr and "does not exist" in r.stderr


def test_cli_failed_job_and_bad_input(api):
    r = api.cli("job", "submit", "--", "no_such_program_abc")
    assert r.returncode == 1 and "failed" in r.stdout and "not found" in r.stdout + r.stderr
    client = JobSubmissionClient(api.url)
    before = {j.submission_id for j in client.list_jobs()}
    r = api.cli("job", "submit", "--runtime-env-json", "{not json", "--", "echo", "hi")
    assert r.returncode == 1 and "--runtime-env-json is not valid JSON" in r.stderr
    r = api.here("job", "submit", "--metadata-json", "[1]", "--", "echo", "hi")
    assert r.returncode == 1 and "--metadata-json must be a JSON object" in r.stderr
    assert {j.submission_id for j in client.list_jobs()} <= before  # nothing was submitted
    r = api.here("job", "status", "raysubmit_missing")
    assert r.returncode == 1 and "raysubmit_missing" in r.stderr
    r = api.here("job", "logs", "--follow", "raysubmit_missing")
    assert r.returncode == 1 and "raysubmit_missing" in r.stderr


@pytest.mark.slow
def test_cli_working_dir_over_the_limit(api, tmp_path):
    big = tmp_path / "wd" / "huge.bin"
    big.parent.mkdir()
    with open(big, "wb") as f:  # sparse: its size counts, its bytes are never read
        f.truncate(600 * 1024 * 1024)
    r = api.cli("job", "submit", "--working-dir", str(big.parent), "--", "echo", "hi")
    assert r.returncode == 1 and "512 MiB" in r.stderr and "huge.bin" in r.stderr


RAY_CLIENT = """
import asyncio, sys, time
from ray.job_submission import JobSubmissionClient, JobStatus
url, token, wd = sys.argv[1:4]
c = JobSubmissionClient(url, headers={"Authorization": "Bearer " + token})
sid = c.submit_job(entrypoint="python main.py", runtime_env={"working_dir": wd, "env_vars": {"GREETING": "ray"}})
async def tail():
    return "".join([chunk async for chunk in c.tail_job_logs(sid)])
print("TAIL", repr(asyncio.run(tail())))
while not c.get_job_status(sid).is_terminal():
    time.sleep(0.1)
info = c.get_job_info(sid)
print("STATUS", info.status, info.type, info.submission_id == sid)
print("LOGS", repr(c.get_job_logs(sid)))
print("LISTED", sid in [j.submission_id for j in c.list_jobs()])
s2 = c.submit_job(entrypoint="sleep 100")
while c.get_job_status(s2) != JobStatus.RUNNING:
    time.sleep(0.1)
print("STOP", c.stop_job(s2))
while not c.get_job_status(s2).is_terminal():
    time.sleep(0.1)
print("STOPPED", c.get_job_status(s2), c.delete_job(s2))
try:
    c.get_job_info(s2)
except RuntimeError as e:
    print("MISSING", "404" in str(e))
"""


@pytest.mark.skipif(not os.path.exists(RAY_PYTHON), reason="Ray is not installed in /opt/rayvenv")
def test_rays_own_job_client_works_against_raylite(api, working_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY", "PYTHONPATH"))}
    r = subprocess.run([RAY_PYTHON, "-c", RAY_CLIENT, api.url, api.token, str(working_dir)], capture_output=True,
                       text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "TAIL 'driver 41 (41, \\'ray\\')" in out.replace('"', "'") or "driver 41 (41, 'ray')" in out
    assert "STATUS SUCCEEDED" in out and "LISTED True" in out
    assert "STOP True" in out and "STOPPED STOPPED True" in out and "MISSING True" in out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(RAY_PYTHON), reason="Ray is not installed in /opt/rayvenv")
def test_rays_job_cli_works_against_raylite(api):
    ray_cli = os.path.join(os.path.dirname(RAY_PYTHON), "ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY", "PYTHONPATH"))}
    r = subprocess.run([ray_cli, "job", "submit", "--address", api.url, "--headers", json.dumps(api.headers),
                        "--", "echo", "hello-from-ray-cli"], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hello-from-ray-cli" in r.stdout and "succeeded" in r.stdout


def test_ctrl_c_while_following_a_submitted_job_leaves_it_running_and_says_so(api):
    """Ctrl-C of `job submit` (which follows the logs) ended with click's bare "Aborted!": the
    job goes on, and the user is now told so and how to stop or follow it."""
    import signal


    sid = "ctrl-c-follow"
    proc = subprocess.Popen([sys.executable, "-m", "raylite.cli", "job", "submit", "--submission-id", sid, "--",
                             "python", "-c", "import time; print('job-started', flush=True); time.sleep(300)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=api.env(),
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if "job-started" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert f"Stopped following job '{sid}'; it keeps running" in err and f"job stop {sid}" in err
    client = JobSubmissionClient(api.url, headers=api.headers)
    assert client.get_job_status(sid) == JobStatus.RUNNING
    assert client.stop_job(sid) is True
    assert _wait_terminal(client, sid).status == JobStatus.STOPPED
