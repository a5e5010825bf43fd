"""The dashboard page in a real browser (Debian's chromium driven by Playwright) against a
live local cluster: what each page shows, live updates, and no JavaScript errors.

Screenshots of every page go to $RAYLITE_TEST_ARTIFACTS/dashboard (or the test's tmp dir).
Skipped, with the reason, where /usr/bin/chromium or playwright is missing (no browser is
ever downloaded: `make install-test` installs Debian's chromium when run as root).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

import raylite
from tests.conftest import wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = ["overview", "nodes", "actors", "tasks", "jobs", "train", "tune", "serve", "metrics", "logs"]

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (apt-get install -y chromium, or `make install-test` as root)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")


class Browser:
    """One chromium page for the module; console errors are collected for the last test."""

    def __init__(self, dashboard) -> None:
        self.dashboard = dashboard
        self.errors: list[str] = []
        self._pw = sync_api.sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        self.page = self._browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.set_default_timeout(60_000)
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.goto(f"{dashboard.url}/?token={dashboard.token}")  # sets the token cookie

    def open(self, name: str) -> None:
        self.page.goto(f"{self.dashboard.url}/#/{name}")
        self.page.wait_for_selector(f"main[data-page='{name}']")

    def shot(self, directory: str, name: str) -> str:
        path = os.path.join(directory, f"{name}.png")
        self.page.screenshot(path=path, full_page=True)
        return path

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()


@pytest.fixture(scope="module")
def browser(dashboard):
    b = Browser(dashboard)
    yield b
    b.close()


def test_nodes_page_lists_the_node_alive(browser, artifacts):
    browser.open("nodes")
    browser.page.wait_for_selector("#nodes td .badge.ALIVE")
    browser.page.wait_for_selector("#nodes h2:has-text('Workers on node')")
    assert "% of 2 cores" in browser.page.inner_text("#nodes")
    browser.shot(artifacts, "nodes")


@raylite.remote
class NamedForDashboard:
    def ping(self) -> str:
        return "pong"


def test_actor_created_by_the_test_appears_with_its_name(browser, artifacts):
    actor = NamedForDashboard.options(name="dashboard_test_actor").remote()
    assert raylite.get(actor.ping.remote()) == "pong"
    browser.open("actors")
    browser.page.wait_for_selector("#actors td:has-text('dashboard_test_actor')")
    browser.page.fill("#af input[data-k='name']", "no-such-actor")
    browser.page.wait_for_selector("#actors .empty")
    browser.page.fill("#af input[data-k='name']", "dashboard_test")
    row = browser.page.wait_for_selector("#actors tr:has-text('dashboard_test_actor')")
    assert "NamedForDashboard" in row.inner_text() and "ALIVE" in row.inner_text()
    browser.shot(artifacts, "actors")


@raylite.remote(max_retries=0)
def fails_for_dashboard() -> None:
    raise ValueError("dashboard-test-failure 1234")


def test_failed_task_shows_its_error_and_traceback(browser, dashboard, artifacts):
    with pytest.raises(ValueError):
        raylite.get(fails_for_dashboard.remote())
    deadline = time.monotonic() + 15
    while not dashboard.get("/api/dashboard/tasks").json():
        if time.monotonic() > deadline:
            pytest.skip("this build records no task events (the state API's task table is empty)")
        time.sleep(0.2)
    browser.open("tasks")
    trace = browser.page.wait_for_selector("#failures pre.trace:has-text('dashboard-test-failure 1234')")
    assert "Traceback" in trace.inner_text() and "fails_for_dashboard" in trace.inner_text()
    browser.page.wait_for_selector("#timeline svg rect")
    browser.shot(artifacts, "tasks")


def test_job_log_line_appears_while_the_job_runs(browser, dashboard, artifacts):
    from raylite.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(dashboard.url)
    code = "import time; print('dashboard-job-line', flush=True); time.sleep(60)"
    job = client.submit_job(entrypoint=f"{sys.executable} -c \"{code}\"")
    try:
        browser.page.goto(f"{dashboard.url}/#/jobs?id={job}")
        browser.page.wait_for_selector("main[data-page='jobs']")
        browser.page.wait_for_selector("#joblog:has-text('dashboard-job-line')")
        assert client.get_job_status(job) == JobStatus.RUNNING  # the line came while it runs
        browser.page.wait_for_selector(f"#jobs tr.selected:has-text('{job}') .badge.RUNNING")
        browser.shot(artifacts, "jobs")
    finally:
        client.stop_job(job)


def _train_loop(config):
    import time

    import torch

    from raylite import train

    torch.manual_seed(train.get_context().get_world_rank())
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    for _ in range(config["steps"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"loss": loss.item()})
        time.sleep(config["sleep_s"])


@pytest.mark.slow  # ~30-50 s on a loaded 2-core box: two torch workers start and train for 8 s
def test_train_loss_chart_shows_both_ranks_and_grows_while_training(browser, dashboard, artifacts, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    from raylite.train import RunConfig, ScalingConfig
    from raylite.train.torch import TorchTrainer

    trainer = TorchTrainer(_train_loop, train_loop_config={"steps": 60, "sleep_s": 0.2},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=RunConfig(name="dashboard_train", storage_path=str(tmp_path)))
    result: dict = {}
    fit = threading.Thread(target=lambda: result.setdefault("r", trainer.fit()), daemon=True)
    fit.start()
    try:
        browser.open("train")
        chart = browser.page.wait_for_selector("#metriccharts [data-key='metric:loss'][data-series='rank 0,rank 1']",
                                                timeout=240_000)  # two torch workers start on a loaded box
        first = int(wait_for(lambda: int(chart.get_attribute("data-points") or 0) >= 2 and chart.get_attribute("data-points"),
                             timeout_s=60, what="points of both ranks on the loss chart"))
        later = int(wait_for(lambda: int(chart.get_attribute("data-points")) > first + 2 and chart.get_attribute("data-points"),
                             timeout_s=60, what="the loss chart to grow"))
        status = browser.page.inner_text("#runs tr.selected .badge")
        assert later > first and status == "RUNNING"  # it grew while the run trained
        browser.page.wait_for_selector("#stepcharts [data-key='step_s'][data-series='rank 0,rank 1']")
        browser.shot(artifacts, "train")
    finally:
        fit.join(timeout=300)
    assert result["r"].error is None


def _tune_objective(config):
    from raylite import tune

    for step in range(1, 6):
        tune.report({"score": config["x"] * step})


XSS = "<img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script>"


def test_tune_page_shows_the_trials_the_best_one_and_the_chart(browser, artifacts, tmp_path):
    from raylite import tune

    tune.Tuner(_tune_objective, param_space={"x": tune.grid_search([1, 2, 3]), "label": XSS},
               tune_config=tune.TuneConfig(metric="score", mode="max"),
               run_config=tune.RunConfig(name="dash_tune_page", storage_path=str(tmp_path), verbose=0)).fit()
    browser.open("tune")
    browser.page.wait_for_selector("#experiments tr.selected:has-text('dash_tune_page') .badge.FINISHED")
    rows = browser.page.locator("#trials tr[data-trial]")
    wait_for(lambda: rows.count() == 3, timeout_s=30, what="three trial rows")
    assert browser.page.locator("#trials .badge.TERMINATED").count() == 3
    best = browser.page.wait_for_selector("#trials tr.best")
    assert "15" in best.inner_text()  # x=3 reported 3 * 5
    assert XSS in browser.page.inner_text("#trials")  # the config's markup shows as text
    assert browser.page.evaluate("window.__xss") is None
    chart = browser.page.wait_for_selector("#tunecharts [data-key='tune:score']")
    assert len(chart.get_attribute("data-series").split(",")) == 3
    assert chart.get_attribute("data-points") == "15"  # 3 trials x 5 iterations
    browser.shot(artifacts, "tune")


def test_serve_app_shows_its_replicas(browser, artifacts):
    try:
        from raylite import serve
    except ImportError as e:
        pytest.skip(f"raylite.serve cannot be imported in this build ({e})")
    if not hasattr(serve, "deployment"):
        pytest.skip("raylite.serve has no deployment() in this build")

    @serve.deployment(num_replicas=2)
    class Hello:
        def __call__(self, request) -> str:
            return "hello"

    from tests.api_fixtures import free_port

    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # 8000 may be taken here
    handle = serve.run(Hello.bind(), name="dash_app", route_prefix="/hello")
    try:
        assert [handle.remote(None).result() for _ in range(5)] == ["hello"] * 5
        browser.open("serve")
        browser.page.wait_for_selector("#serve td:has-text('dash_app')", timeout=60_000)
        wait_for(lambda: browser.page.locator("#serve tr:has-text('Hello') .badge.RUNNING").count() >= 2,
                 timeout_s=60, what="two RUNNING replicas of Hello on the Serve page")
        browser.page.wait_for_selector("#serve tr[data-deployment='Hello']:not([data-requests='0'])")
        browser.shot(artifacts, "serve")
    finally:
        serve.shutdown()


def test_logs_page_lists_files_and_shows_one(browser, artifacts):
    browser.open("logs")
    browser.page.wait_for_selector("#files tr.clickable:has-text('node.')")
    browser.page.locator("#files tr.clickable:has-text('node.')").first.click()  # the node daemon's log
    browser.page.wait_for_selector("#logname:has-text('node.')")
    browser.page.wait_for_function("document.querySelector('#logtext').textContent.length > 0")
    browser.shot(artifacts, "logs")


def test_every_page_renders_without_javascript_errors(browser, artifacts):
    for name in PAGES:
        browser.open(name)
        browser.page.wait_for_function("document.querySelector('#status').textContent.length > 0")
        browser.page.wait_for_timeout(1500)  # one more poll of each live part
        browser.shot(artifacts, f"page_{name}")
    assert browser.errors == []
