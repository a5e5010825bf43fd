"""Web pages in the user's browser cannot drive the API server (issue 33, finding 3), checked
in Debian's chromium with Playwright against live clusters (started in subprocesses):
- a page on another port of the same host, in a browser that opened the dashboard link (so it
  holds the token cookie, which ignores ports), cannot submit a job (text/plain `fetch`, or a
  form) nor read a job's log through the WebSocket;
- in no-auth mode, a page under another host name rebound to 127.0.0.1 (chromium's
  --host-resolver-rules) cannot list or submit jobs;
- the dashboard itself still loads, submits from its own origin, and tails a log.
Traffic stays on 127.0.0.1 (the rebound name resolves there inside chromium only)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--host-resolver-rules=MAP rebound.test 127.0.0.1"]
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

CLUSTER = """
import json, sys, raylite
from raylite import api
ctx = raylite.init(num_cpus=1, dashboard_port=0)
print(json.dumps({"url": "http://" + ctx.dashboard_url.split("/?")[0], "token": api.ensure_initialized().token}), flush=True)
sys.stdin.read()
"""

EVIL_PAGE = """<!doctype html><html><body><form id=f method=POST enctype=text/plain></form><script>
async function attack(api, jobId) {
  const out = {log: ""};
  try {
    await fetch(api + "/api/jobs/", {method: "POST", mode: "no-cors", credentials: "include",
      headers: {"Content-Type": "text/plain"}, body: JSON.stringify({entrypoint: "echo CSRF-FETCH"})});
  } catch (e) { out.fetchError = String(e); }
  await new Promise((done) => {
    const ws = new WebSocket(api.replace("http", "ws") + "/api/jobs/" + jobId + "/logs/tail");
    ws.onmessage = (m) => { out.log += m.data; };
    ws.onclose = ws.onerror = () => done();
    setTimeout(done, 4000);
  });
  return out;
}
</script></body></html>"""


def _cluster(extra_env: dict[str, str]):
    env = {**os.environ, **extra_env}
    env.pop("RAYLITE_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail("the cluster subprocess did not start")
    return proc, json.loads(line)


def _stop(proc) -> None:
    with contextlib.suppress(Exception):
        proc.stdin.close()
        proc.wait(60)
    if proc.poll() is None:
        proc.kill()


@pytest.fixture(scope="module")
def cluster():
    proc, info = _cluster({})
    yield info
    _stop(proc)


@pytest.fixture(scope="module")
def evil_site():
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = EVIL_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    yield b
    b.close()
    pw.stop()


def _jobs(info) -> list[dict]:
    r = httpx.get(info["url"] + "/api/jobs/", headers={"Authorization": f"Bearer {info['token']}"}, timeout=30)
    r.raise_for_status()
    return r.json()


def _submit(info, entrypoint: str) -> str:
    r = httpx.post(info["url"] + "/api/jobs/", json={"entrypoint": entrypoint},
                   headers={"Authorization": f"Bearer {info['token']}"}, timeout=60)
    r.raise_for_status()
    return r.json()["submission_id"]


def _wait_log(info, job_id: str, text: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = httpx.get(f"{info['url']}/api/jobs/{job_id}/logs",
                      headers={"Authorization": f"Bearer {info['token']}"}, timeout=30)
        if text in r.text:
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} never logged {text!r}")


def test_a_page_on_another_port_cannot_submit_jobs_or_read_logs(cluster, evil_site, browser):
    job = _submit(cluster, "echo SECRET-LOG-LINE")
    _wait_log(cluster, job, "SECRET-LOG-LINE")
    page = browser.new_page()
    page.goto(f"{cluster['url']}/?token={cluster['token']}")  # the user opened the dashboard link
    page.goto(evil_site)
    out = page.evaluate("([api, job]) => attack(api, job)", [cluster["url"], job])
    # a form POST too (a top-level navigation: no CORS at all)
    with contextlib.suppress(Exception):
        page.evaluate("""(api) => { const f = document.getElementById('f'); f.action = api + '/api/jobs/';
            const i = document.createElement('input'); i.name = '{"entrypoint": "echo CSRF-FORM", "x'; i.value = '": 1}';
            f.appendChild(i); f.submit(); }""", cluster["url"])
        page.wait_for_load_state()
    assert "SECRET-LOG-LINE" not in out["log"]
    entrypoints = [j.get("entrypoint", "") for j in _jobs(cluster)]
    assert not [e for e in entrypoints if "CSRF" in e], entrypoints
    page.close()


def test_the_dashboard_itself_still_submits_and_tails_logs(cluster, browser):
    job = _submit(cluster, "echo OWN-LOG-LINE")
    _wait_log(cluster, job, "OWN-LOG-LINE")
    page = browser.new_page()
    page.goto(f"{cluster['url']}/?token={cluster['token']}")
    page.wait_for_selector("main[data-page]")
    status = page.evaluate("""async (api) => (await fetch(api + '/api/jobs/', {method: 'POST',
        credentials: 'same-origin', headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({entrypoint: 'echo FROM-DASHBOARD'})})).status""", cluster["url"])
    assert status == 200
    log = page.evaluate("""(url) => new Promise((done) => { let got = '';
        const ws = new WebSocket(url); ws.onmessage = (m) => { got += m.data; };
        ws.onclose = () => done(got); setTimeout(() => done(got), 4000); })""",
                        cluster["url"].replace("http", "ws") + f"/api/jobs/{job}/logs/tail")
    assert "OWN-LOG-LINE" in log
    assert any("FROM-DASHBOARD" in j.get("entrypoint", "") for j in _jobs(cluster))
    page.close()


@pytest.fixture
def no_auth_head():
    """A head started as `raylite start --head` with RAY_AUTH_MODE=disabled, RAYLITE_ALLOW_NO_AUTH=1."""
    from raylite._core import config as config_mod
    from raylite._core.cluster import cluster as C

    from ..cluster.conftest import free_port, stop_started_head

    no_auth = {"RAY_AUTH_MODE": "disabled", "RAYLITE_ALLOW_NO_AUTH": "1"}
    env = {k: v for k, v in os.environ.items() if k != "RAYLITE_TOKEN"}
    cfg = config_mod.Config.from_env({**env, **no_auth}).replace(
        temp_dir=tempfile.mkdtemp(prefix="rlna", dir="/tmp"))
    dport = free_port()
    head = None
    try:
        head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1,
                            include_dashboard=True, dashboard_port=dport, env=no_auth)
        yield f"http://127.0.0.1:{dport}"
    finally:
        stop_started_head(cfg, head)
        shutil.rmtree(cfg.temp_dir, ignore_errors=True)


def test_a_rebound_host_name_cannot_use_a_no_auth_api_server(browser, no_auth_head):
    url = no_auth_head
    assert httpx.get(url + "/api/jobs/", timeout=60).status_code == 200  # no token needed here
    port = url.rsplit(":", 1)[1]
    page = browser.new_page()
    response = page.goto(f"http://rebound.test:{port}/api/jobs/")
    assert response.status == 403 and "RAYLITE_DASHBOARD_ALLOWED_HOSTS" in page.content()
    status = page.evaluate("""async () => (await fetch('/api/jobs/', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({entrypoint: 'echo REBOUND'})})).status""")
    assert status == 403
    assert not [j for j in httpx.get(url + "/api/jobs/", timeout=30).json() if "REBOUND" in j.get("entrypoint", "")]
    assert page.goto(f"{url}/api/version").status == 200  # by its address, it serves the browser
    page.close()


def test_programs_are_not_browsers_and_text_posts_are_refused(cluster):
    """What Ray's SDK, CLI and KubeRay send still works; a text/plain POST does not."""
    auth = {"Authorization": f"Bearer {cluster['token']}"}
    r = httpx.post(cluster["url"] + "/api/jobs/", content=json.dumps({"entrypoint": "echo TEXT"}),
                   headers={**auth, "Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 415 and "application/json" in r.text
    r = httpx.post(cluster["url"] + "/api/jobs/", json={"entrypoint": "echo SDK"}, headers=auth, timeout=60)
    assert r.status_code == 200
