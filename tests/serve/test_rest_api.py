"""Ray's Serve REST API on the head's HTTP server: PUT deploys a ServeDeploySchema
declaratively (idempotent), GET reports ServeInstanceDetails, DELETE shuts Serve down."""

from __future__ import annotations

import textwrap

import httpx
import pytest

import raylite
from tests.api_fixtures import free_port, start_api_cluster
from tests.conftest import wait_for

PATH = "/api/serve/applications/"

APP = textwrap.dedent("""
    from raylite import serve

    @serve.deployment
    class Greeter:
        def __init__(self, greeting: str):
            self.greeting = greeting

        def __call__(self, request):
            return self.greeting

    def build(args):
        return Greeter.bind(args.get("greeting", "hello"))
""")


@pytest.fixture(scope="module")
def api():
    api = start_api_cluster(num_cpus=4)
    yield api
    with api.client() as c:
        c.delete(PATH)
    raylite.shutdown()


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rest_app")
    (d / "greeter_app.py").write_text(APP)
    (d / "broken_app.py").write_text("raise ImportError('this module is broken on purpose')\n")
    (d / "failing_app.py").write_text(textwrap.dedent("""
        from raylite import serve

        @serve.deployment
        class Failing:
            def __init__(self):
                raise RuntimeError("constructor refuses on purpose")

        app = Failing.bind()
    """))
    return d


def config(app_dir, port: int, greeting: str = "bonjour", num_replicas: int = 1, **extra) -> dict:
    return {"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": port},
            "applications": [{"name": "greet", "route_prefix": "/greet", "import_path": "greeter_app:build",
                              "args": {"greeting": greeting},
                              "runtime_env": {"working_dir": f"local://{app_dir}"},
                              "deployments": [{"name": "Greeter", "num_replicas": num_replicas}]}], **extra}


def details(c: httpx.Client, **params) -> dict:
    r = c.get(PATH, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def wait_app(c: httpx.Client, name: str, status: str, n_running: int | None = None) -> dict:
    def ready():
        app = details(c)["applications"].get(name)
        if app is None or app["status"] != status:
            return None
        if n_running is not None:
            reps = [r for d in app["deployments"].values() for r in d["replicas"] if r["state"] == "RUNNING"]
            if len(reps) != n_running:
                return None
        return app

    return wait_for(ready, 90, interval_s=0.1, what=f"application {name} {status}")


def replica_ids(app: dict) -> list[str]:
    return sorted(r["replica_id"] for d in app["deployments"].values() for r in d["replicas"])


def test_put_get_idempotent_put_and_delete(api, app_dir):
    port = free_port()
    with api.client() as c:
        assert details(c) == {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}
        assert c.put(PATH, json=config(app_dir, port)).status_code == 200
        app = wait_app(c, "greet", "RUNNING", 1)
        assert httpx.get(f"http://127.0.0.1:{port}/greet", timeout=30).text == "bonjour"
        full = details(c)
        assert full["controller_info"]["node_id"] and full["http_options"]["port"] == port
        assert app["source"] == "declarative" and app["route_prefix"] == "/greet"
        assert app["deployed_app_config"]["args"] == {"greeting": "bonjour"}
        dep = app["deployments"]["Greeter"]
        assert dep["status"] == "HEALTHY" and dep["target_num_replicas"] == 1
        assert dep["deployment_config"]["num_replicas"] == 1
        assert details(c, api_type="declarative")["applications"].keys() == {"greet"}
        assert details(c, api_type="imperative")["applications"] == {}
        # the helper driver behind this API is no job of the user's
        assert not [j for j in c.get("/api/jobs/").json() if "rest_agent" in (j.get("entrypoint") or "")]
        assert not [j for j in c.get("/api/v0/jobs").json()["data"]["result"]["result"]
                    if "rest_agent" in (j.get("entrypoint") or "")]
        bad_type = c.get(PATH, params={"api_type": "sideways"})
        assert bad_type.status_code == 400 and "declarative" in bad_type.text

        # the same config again: nothing restarts
        before = replica_ids(app)
        assert c.put(PATH, json=config(app_dir, port)).status_code == 200
        assert replica_ids(wait_app(c, "greet", "RUNNING", 1)) == before

        # a changed argument rolls out the new version
        assert c.put(PATH, json=config(app_dir, port, greeting="salut")).status_code == 200
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/greet", timeout=30).text == "salut", 90,
                 what="the new greeting")

        assert c.delete(PATH).status_code == 200
        assert details(c)["applications"] == {}
        assert details(c)["controller_info"] == {}


def test_schema_errors_are_400_naming_the_field(api, app_dir):
    with api.client() as c:
        cases = [
            ({"applications": [{"name": "x", "import_path": "nocolon"}]}, "applications[0].import_path"),
            ({"applications": [{"import_path": "a:b", "route_prefix": "no-slash"}]}, "route_prefix"),
            ({"applications": [{"import_path": "a:b"}], "typo_field": 1}, "typo_field"),
            ({"applications": [{"import_path": "a:b", "runtime_env": {"working_dir": "/my/laptop"}}]},
             "must be a URI"),
            ({"applications": [{"import_path": "a:b"}], "target_capacity": 150}, "target_capacity"),
        ]
        for body, expected in cases:
            r = c.put(PATH, json=body)
            assert r.status_code == 400 and expected in r.text, (body, r.text)
        r = c.put(PATH, content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not JSON" in r.text
        r = c.put(PATH, json=["a", "list"])
        assert r.status_code == 400 and "JSON object" in r.text
        assert details(c)["applications"] == {}


def test_import_failure_is_deploy_failed_and_target_capacity_scales(api, app_dir):
    port = free_port()
    with api.client() as c:
        broken = config(app_dir, port)
        broken["applications"][0]["import_path"] = "broken_app:app"
        assert c.put(PATH, json=broken).status_code == 200
        app = wait_app(c, "greet", "DEPLOY_FAILED")
        assert "broken on purpose" in app["message"]

        failing = config(app_dir, port)
        failing["applications"][0].update(import_path="failing_app:app", deployments=[], args={})
        assert c.put(PATH, json=failing).status_code == 200
        app = wait_app(c, "greet", "DEPLOY_FAILED")
        assert "constructor refuses on purpose" in app["message"] + str(app["deployments"])

        assert c.put(PATH, json=config(app_dir, port, num_replicas=4, target_capacity=50)).status_code == 200
        app = wait_app(c, "greet", "RUNNING", 2)
        assert details(c)["target_capacity"] == 50
        assert app["deployments"]["Greeter"]["target_num_replicas"] == 2
        kept = replica_ids(app)
        assert c.put(PATH, json=config(app_dir, port, num_replicas=4, target_capacity=100)).status_code == 200
        app = wait_app(c, "greet", "RUNNING", 4)
        assert set(kept) <= set(replica_ids(app))  # scaled up, the running two kept
        assert c.delete(PATH).status_code == 200


def _agent_pid(api) -> int:
    """The Serve REST agent of this cluster: the process whose stderr is this session's agent log."""
    import os

    import psutil

    log = os.path.join(api.session_dir, "logs", "serve_rest_agent.log")
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "raylite.serve._internal.rest_agent" in " ".join(p.info["cmdline"] or []) and \
                    os.readlink(f"/proc/{p.pid}/fd/2") == log:
                return p.pid
        except (OSError, psutil.Error):
            continue
    return 0


def test_a_dead_agent_is_replaced_on_the_next_request(api):
    import os
    import signal

    from tests.conftest import process_gone

    with api.client() as c:
        details(c)
        pid = wait_for(lambda: _agent_pid(api), 30, what="the Serve REST agent")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: process_gone(pid), 30, what="the agent gone")
        assert details(c)["applications"] == {}
        assert _agent_pid(api) not in (0, pid)


def test_delete_right_after_put_leaves_serve_shut_down(api, app_dir):
    with api.client() as c:
        assert c.put(PATH, json=config(app_dir, free_port())).status_code == 200
        assert c.delete(PATH).status_code == 200  # waits for the PUT's deploy task first
        assert details(c) == {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}


@pytest.fixture
def zip_server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/site (GitHub-like archive zips)."""
    import functools
    import http.server
    import threading

    site = tmp_path / "site"
    site.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)


def test_working_dir_from_an_https_style_zip_uri(api, zip_server):
    import zipfile

    site, base = zip_server
    with zipfile.ZipFile(site / "archive.zip", "w") as z:  # one top-level directory, as GitHub's
        z.writestr("repo-abc123/greeter_app.py", APP)
    port = free_port()
    body = config("unused", port, greeting="from a zip")
    body["applications"][0]["runtime_env"] = {"working_dir": f"{base}/archive.zip"}
    with api.client() as c:
        assert c.put(PATH, json=body).status_code == 200
        wait_app(c, "greet", "RUNNING", 1)
        assert httpx.get(f"http://127.0.0.1:{port}/greet", timeout=30).text == "from a zip"
        body["applications"][0]["runtime_env"] = {"working_dir": f"{base}/missing.zip"}
        assert c.put(PATH, json=body).status_code == 200
        app = wait_app(c, "greet", "DEPLOY_FAILED")
        assert "missing.zip" in app["message"] and "could not be downloaded" in app["message"]
        assert c.delete(PATH).status_code == 200
