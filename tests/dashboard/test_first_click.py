"""The dashboard opens on the first click: `init()` and `raylite start --head` print the link
with the token, the context's `dashboard_url` carries it, and a real browser (Debian's
chromium) that opens the printed link sees the dashboard, with the token gone from its URL."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import httpx
import pytest

from tests.api_fixtures import free_port

LINK = re.compile(r"View the dashboard at (http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]+))")
CHROMIUM = "/usr/bin/chromium"
SCRIPT = """
import sys, raylite
ctx = raylite.init(num_cpus=1, dashboard_port={port})
print("URL", ctx.dashboard_url, flush=True)
from raylite.job_submission import JobSubmissionClient
print("JOBS", [j.type for j in JobSubmissionClient("http://" + ctx.dashboard_url).list_jobs()], flush=True)
print("TOKEN", open(ctx["session_dir"] + "/token").read().strip(), flush=True)
sys.stdin.readline()  # stay up until the test is done with the cluster
raylite.shutdown()
"""


@pytest.fixture()
def short_tmp():
    """A temp dir short enough for the session's unix sockets (pytest's tmp_path is not)."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="rl-click-", dir="/tmp")
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def init_process(short_tmp):
    """A driver that ran `init()` in another process; yields (its stderr so far, its stdout)."""
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(short_tmp / "sessions")}
    env.pop("RAYLITE_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(port=free_port())], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out = {}
    try:
        for line in proc.stdout:
            key, _, value = line.partition(" ")
            out[key] = value.strip()
            if key == "TOKEN":
                break
        assert "TOKEN" in out, proc.stderr.read()
        yield proc, out
    finally:
        proc.stdin.close()
        proc.wait(60)


def test_init_prints_the_link_with_the_token_once_and_the_context_carries_it(init_process):
    proc, out = init_process
    token = out["TOKEN"]
    assert out["URL"].startswith("127.0.0.1:") and out["URL"].endswith(f"/?token={token}")
    assert out["JOBS"] == "[<JobType.DRIVER: 'DRIVER'>]"  # the client took the token from the link
    proc.stdin.close()
    proc.wait(60)
    links = LINK.findall(proc.stderr.read())
    assert len(links) == 1 and links[0][2] == token
    assert links[0][0] == "http://" + out["URL"]


def test_an_api_client_without_the_token_keeps_the_json_401(init_process):
    _, out = init_process
    base = "http://" + out["URL"].split("/?")[0]
    r = httpx.get(base + "/api/version", timeout=30)
    assert r.status_code == 401 and r.headers["content-type"] == "application/json"
    page = httpx.get(base + "/", headers={"Accept": "text/html"}, timeout=30)
    assert page.status_code == 401 and "<html" in page.text and "?token=" in page.text


def test_raylite_start_head_prints_the_dashboard_link(short_tmp):
    tmp_path = short_tmp
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path / "sessions")}
    env.pop("RAYLITE_ADDRESS", None)
    dash_port = free_port()
    cli = [sys.executable, "-m", "raylite.cli"]
    started = subprocess.run([*cli, "start", "--head", f"--port={free_port()}", "--num-cpus=1",
                              f"--dashboard-port={dash_port}"],
                             env=env, capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        token = open(next((tmp_path / "sessions").glob("session_*/token"))).read().strip()
        assert f"Dashboard:                 http://127.0.0.1:{dash_port}/?token={token}" in started.stdout
        r = httpx.get(f"http://127.0.0.1:{dash_port}/?token={token}", timeout=60,
                      headers={"Accept": "text/html"}, follow_redirects=True)
        assert r.status_code == 200 and "raylite" in r.text  # followed the redirect, cookie set
        assert str(r.url) == f"http://127.0.0.1:{dash_port}/"
    finally:
        subprocess.run([*cli, "stop"], env=env, capture_output=True, timeout=60)


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install -y chromium)")
def test_chromium_opens_the_printed_link_and_sees_the_dashboard(init_process):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    proc, out = init_process
    link = "http://" + out["URL"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(link)
            page.wait_for_selector("main[data-page='overview']")
            assert "token=" not in page.url  # redirected to the clean URL: not in the history
            assert page.url == link.split("?")[0]
            page.goto(link.split("?")[0] + "#/nodes")  # the cookie opens every later page
            page.wait_for_selector("#nodes td .badge.ALIVE")
            fresh_ctx = browser.new_context()  # another profile has no cookie: the how-to page
            fresh = fresh_ctx.new_page()
            response = fresh.goto(link.split("?")[0])
            assert response.status == 401 and "?token=" in fresh.inner_text("body")
        finally:
            browser.close()


def test_a_quiet_init_and_one_without_a_dashboard_print_no_link(short_tmp):
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(short_tmp / "sessions")}
    env.pop("RAYLITE_ADDRESS", None)
    code = ("import raylite; raylite.init(num_cpus=1, logging_level='WARNING'); raylite.shutdown(); "
            "raylite.init(num_cpus=1, include_dashboard=False); raylite.shutdown()")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "View the dashboard" not in r.stderr
