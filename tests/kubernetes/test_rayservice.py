"""A RayService: the operator PUTs the serveConfigV2 to the head's :8265/api/serve/applications/
(utils/dashboardclient: UpdateDeployments, with `x-ray-authorization` under token auth), polls
`GET ...?api_type=declarative` until the app is RUNNING with HEALTHY deployments, and then
routes traffic to every pod whose :8000 answers (the worker probe reads :8000/-/healthz)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from .conftest import RAY_IMPORT, RayClusterPods
from .kuberay import DASHBOARD_PORT, SERVE_PORT
from .pods import wait_for

pytestmark = pytest.mark.slow

APP = RAY_IMPORT + """
from raylite import serve

@serve.deployment
class Hello:
    def __init__(self):
        self.greeting = "hello"

    def reconfigure(self, config: dict):
        self.greeting = config.get("greeting", "hello")

    def __call__(self, request):
        return f"{self.greeting} from {ray.util.get_node_ip_address()}"

app = Hello.bind()
"""

# a RayService's spec.serveConfigV2, as YAML-to-JSON gives it to the dashboard client
SERVE_CONFIG = {
    "proxy_location": "EveryNode",
    "http_options": {"host": "0.0.0.0", "port": SERVE_PORT},
    "applications": [{
        "name": "kr_app", "route_prefix": "/", "import_path": "kr_app:app",
        "deployments": [{"name": "Hello", "num_replicas": 2, "user_config": None,
                         "ray_actor_options": {"num_cpus": 0.1}}],
    }],
}


@pytest.fixture(scope="module")
def cluster(hosts, tmp_path_factory):
    c = RayClusterPods(hosts, str(tmp_path_factory.mktemp("rayservice")), service=True)
    app_env = {"PYTHONPATH": "/tmp/app"}  # the image's code (here: a file in every pod)
    for name in (f"{c.name}-head", f"{c.name}-worker-0"):  # in the image: there before the pod starts
        os.makedirs(os.path.join(c.root, name, "tmp", "app"), exist_ok=True)
        with open(os.path.join(c.root, name, "tmp", "app", "kr_app.py"), "w") as f:
            f.write(APP)
    try:
        c.start_head(app_env)
        c.start_worker(0, app_env)
        c.wait_ready(timeout_s=30.0)
        yield c
    finally:
        c.stop()


def _api(cluster, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{cluster.head.ip}:{DASHBOARD_PORT}{path}", data=data, method=method,
                                 headers={"x-ray-authorization": f"Bearer {cluster.token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _serve(ip: str, path: str = "/") -> str | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{SERVE_PORT}{path}", timeout=3) as r:
            return r.read().decode()
    except OSError:
        return None


def _app_ready(cluster) -> dict | None:
    status, body = _api(cluster, "GET", "/api/serve/applications/?api_type=declarative")
    if status != 200:
        return None
    app = json.loads(body).get("applications", {}).get("kr_app")
    if not app or app.get("status") != "RUNNING":
        return None
    deps = app.get("deployments", {})
    return app if deps and all(d.get("status") == "HEALTHY" for d in deps.values()) else None


def test_serve_config_put_reaches_running_and_is_served_on_every_pod(cluster):
    status, body = _api(cluster, "GET", "/api/serve/applications/?api_type=declarative")
    if status == 404:
        pytest.skip("this tree has no Serve REST API on the head (raycli's branch adds it)")
    status, body = _api(cluster, "PUT", "/api/serve/applications/", SERVE_CONFIG)
    assert status == 200, body
    try:
        app = wait_for(lambda: _app_ready(cluster), 120, "kr_app RUNNING with HEALTHY deployments", interval_s=1)
    except AssertionError:
        raise AssertionError(_api(cluster, "GET", "/api/serve/applications/?api_type=declarative")[1].decode()
                             + cluster.logs()) from None
    assert set(app["deployments"]) == {"Hello"}
    for pod in cluster.pods:  # every pod's proxy serves it (EveryNode)
        got = wait_for(lambda pod=pod: _serve(pod.ip), 60, f"Serve on {pod.name}:8000")
        assert got.startswith("hello from ")
    assert cluster.probes_pass(cluster.workers[0], "worker", serve_worker=True)
    assert _serve(cluster.head.ip, "/-/healthz") == "success"  # what the RayService controller reads
    # the same config again (every reconcile re-sends it while it differs from the cache): no change
    status, _ = _api(cluster, "PUT", "/api/serve/applications/", SERVE_CONFIG)
    assert status == 200 and _app_ready(cluster) is not None
    # an upgrade in place: a new user_config reaches the replicas
    upgraded = json.loads(json.dumps(SERVE_CONFIG))
    upgraded["applications"][0]["deployments"][0]["user_config"] = {"greeting": "bonjour"}
    status, body = _api(cluster, "PUT", "/api/serve/applications/", upgraded)
    assert status == 200, body
    try:
        wait_for(lambda: (_serve(cluster.workers[0].ip) or "").startswith("bonjour from "), 120,
                 "the upgraded app on the worker's :8000", interval_s=1)
    except AssertionError:
        raise AssertionError(_api(cluster, "GET", "/api/serve/applications/?api_type=declarative")[1].decode()
                             + f"\nworker :8000 says {_serve(cluster.workers[0].ip)!r}") from None
