"""The jobs REST API through httpx: Ray's paths and JSON, failures, stop, auth."""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import process_gone, wait_for

pytestmark = pytest.mark.timeout(180)


def _wait_status(c, sid, statuses=("SUCCEEDED", "FAILED", "STOPPED"), timeout_s=60):
    return wait_for(lambda: (d := c.get(f"/api/jobs/{sid}").json())["status"] in statuses and d,
                    timeout_s, 0.1, f"job {sid} to reach {statuses}")


def test_submit_runs_a_driver_that_joins_the_cluster(api):
    c = api.client()
    code = "import raylite; raylite.init(address='auto'); print('sum', sum(raylite.get([raylite.remote(lambda i: i).remote(i) for i in range(4)])))"
    r = c.post("/api/jobs/", json={"entrypoint": f'{sys.executable} -c "{code}"', "metadata": {"owner": "me"},
                                   "runtime_env": {"env_vars": {"GREETING": "hi"}}})
    assert r.status_code == 200, r.text
    body = r.json()
    sid = body["submission_id"]
    assert body["job_id"] == sid and sid.startswith("raysubmit_")
    d = _wait_status(c, sid)
    assert d["status"] == "SUCCEEDED", d
    assert d["type"] == "SUBMISSION" and d["metadata"] == {"owner": "me"} and d["driver_exit_code"] == 0
    assert d["start_time"] <= d["end_time"] and d["message"] == "Job finished successfully."
    assert d["job_id"] and d["driver_info"]["id"] == d["job_id"]  # the driver registered with the head
    assert "sum 6" in c.get(f"/api/jobs/{sid}/logs").json()["logs"]
    listed = c.get("/api/jobs/").json()
    assert any(j["submission_id"] == sid and j["status"] == "SUCCEEDED" for j in listed)
    assert any(j["type"] == "DRIVER" for j in listed)  # this test process's own driver
    # the log lives in the session's logs folder, one file per job
    assert os.path.exists(os.path.join(api.session_dir, "logs", f"job-driver-{sid}.log"))


def test_missing_entrypoint_fails_with_the_shells_message(api):
    c = api.client()
    sid = c.post("/api/jobs/", json={"entrypoint": "no_such_command_xyz --flag"}).json()["submission_id"]
    d = _wait_status(c, sid)
    assert d["status"] == "FAILED" and d["driver_exit_code"] == 127
    assert d["error_type"] == "JOB_ENTRYPOINT_COMMAND_ERROR"
    logs = c.get(f"/api/jobs/{sid}/logs").json()["logs"]
    assert "no_such_command_xyz" in logs and "not found" in logs
    assert "exit code 127" in d["message"] and "not found" in d["message"]


def test_stop_ends_the_whole_process_tree(api, tmp_path):
    c = api.client()
    pids = tmp_path / "pids"
    # the entrypoint starts a child in its own session (it leaves the process group), then waits
    script = (f"import os, subprocess, time; p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); time.sleep(300)")
    sid = c.post("/api/jobs/", json={"entrypoint": f'{sys.executable} -c "{script}"'}).json()["submission_id"]
    wait_for(lambda: pids.exists() and pids.read_text().strip(), 60, 0.1, "the job to start its child")
    parent, child = (int(p) for p in pids.read_text().split())
    assert c.get(f"/api/jobs/{sid}").json()["status"] == "RUNNING"
    assert c.post(f"/api/jobs/{sid}/stop").json() == {"stopped": True}
    d = _wait_status(c, sid)
    assert d["status"] == "STOPPED"

    wait_for(lambda: process_gone(parent) and process_gone(child), 30, 0.1, "the entrypoint and its child to exit")
    assert c.post(f"/api/jobs/{sid}/stop").json() == {"stopped": False}  # already ended


def test_unknown_job_is_404_naming_it(api):
    c = api.client()
    for method, path in [("GET", "/api/jobs/raysubmit_nope"), ("GET", "/api/jobs/raysubmit_nope/logs"),
                         ("POST", "/api/jobs/raysubmit_nope/stop"), ("DELETE", "/api/jobs/raysubmit_nope")]:
        r = c.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert "raysubmit_nope" in r.text


def test_delete_only_ended_jobs_and_duplicate_ids(api):
    c = api.client()
    sid = c.post("/api/jobs/", json={"entrypoint": "sleep 30", "submission_id": "my-job-1"}).json()["submission_id"]
    assert sid == "my-job-1"
    dup = c.post("/api/jobs/", json={"entrypoint": "echo x", "submission_id": "my-job-1"})
    # Ray answers a duplicate with 500 and KubeRay's RayJob submitter matches this sentence
    assert dup.status_code == 500 and "Please use a different submission_id" in dup.text
    busy = c.delete(f"/api/jobs/{sid}")
    assert busy.status_code == 400 and "non-terminal" in busy.text
    c.post(f"/api/jobs/{sid}/stop")
    _wait_status(c, sid)
    assert c.delete(f"/api/jobs/{sid}").json() == {"deleted": True}
    assert c.get(f"/api/jobs/{sid}").status_code == 404


@pytest.mark.parametrize("body, expect", [
    (b"{not json", "not JSON"),
    (b'{"entrypoint": ""}', "entrypoint"),
    (b'{"entrypoint": "echo", "runtime_env": [1]}', "runtime_env"),
    (b'{"entrypoint": "echo", "entrypoint_num_cpus": 1000}', "no node"),
])
def test_bad_submissions_are_400(api, body, expect):
    r = api.client().post("/api/jobs/", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and expect in r.text, r.text


def test_every_route_needs_the_token(api):
    import httpx

    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        for method, path in [("GET", "/api/version"), ("GET", "/api/jobs/"), ("POST", "/api/jobs/"),
                             ("GET", "/api/v0/actors"), ("GET", "/does/not/exist")]:
            r = httpx.request(method, api.url + path, headers=headers, json={"entrypoint": "touch /tmp/x"})
            assert r.status_code == 401, (method, path, headers)
    ok = httpx.get(api.url + "/api/version", headers=api.headers)
    assert ok.status_code == 200
    assert tuple(int(x) for x in ok.json()["ray_version"].split(".")[:2]) >= (2, 8)  # Ray's client checks
    # a browser: ?token= once, then the cookie
    with httpx.Client(base_url=api.url) as browser:
        assert browser.get("/api/version", params={"token": api.token}).status_code == 200
        assert browser.get("/api/jobs/").status_code == 200


def test_websocket_tail_needs_the_token(api):
    import asyncio

    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async def attempt():
        async with connect(api.url.replace("http://", "ws://") + "/api/jobs/x/logs/tail") as ws:
            await ws.recv()

    with pytest.raises(InvalidStatus):
        asyncio.run(attempt())
