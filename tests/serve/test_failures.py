"""Failures: a constructor that raises, replicas no node can host, dead replicas, failed health
checks and a killed controller -- each ends in a clear error or a recovered app, never a hang."""


import httpx
import pytest

import raylite
from raylite.serve._internal.client import get_controller
from tests.conftest import wait_for


def _replicas(app: str, dep: str) -> list[dict]:
    return raylite.get(get_controller().list_replicas.remote(app, dep))


def test_constructor_error_fails_the_deploy_with_the_traceback(serve_instance):
    serve, _url = serve_instance

    @serve.deployment
    class Broken:
        def __init__(self) -> None:
            raise RuntimeError("cannot load weights from /nowhere")

    with pytest.raises(RuntimeError) as info:
        serve.run(Broken.bind(), name="broken", route_prefix="/broken")
    assert "cannot load weights from /nowhere" in str(info.value)
    assert "Traceback" in str(info.value) and "Broken" in str(info.value)
    app = serve.status().applications["broken"]
    assert app.status == "DEPLOY_FAILED"
    assert app.deployments["Broken"].status == "DEPLOY_FAILED"
    assert "cannot load weights" in app.deployments["Broken"].message
    serve.delete("broken")


def test_unplaceable_replicas_fail_fast_naming_the_request(serve_instance):
    serve, _url = serve_instance

    @serve.deployment(ray_actor_options={"num_gpus": 1})
    def gpu(request) -> str:
        return "never"

    # It fails because no node can ever host the replica (the message says so), not after
    # waiting out a deadline: serve.run's own timeout is far away.
    with pytest.raises(RuntimeError) as info:
        serve.run(gpu.bind(), name="gpu", route_prefix="/gpu", timeout_s=3600)
    msg = str(info.value)
    assert "gpu" in msg and "GPU" in msg and "timed out" not in msg.lower()
    serve.delete("gpu")

    @serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 4})
    def big(request) -> str:
        return "never"

    with pytest.raises(RuntimeError) as info:
        serve.run(big.bind(), name="big", route_prefix="/big")
    msg = str(info.value)
    assert "'big'" in msg and "CPU" in msg and "cluster has" in msg
    serve.delete("big")


def test_dead_replica_is_replaced_and_app_keeps_serving(serve_instance):
    serve, url = serve_instance

    @serve.deployment(num_replicas=2)
    def pid(request) -> int:
        import os

        return os.getpid()

    serve.run(pid.bind(), name="pid", route_prefix="/pid")
    before = _replicas("pid", "pid")
    victim = before[0]
    raylite.kill(raylite.get_actor(victim["actor_name"], namespace="serve"))
    wait_for(lambda: len([r for r in _replicas("pid", "pid") if r["state"] == "RUNNING"
                          and r["replica_id"] != victim["replica_id"]]) == 2, timeout_s=30,
             what="a replacement replica")
    pids = {httpx.get(f"{url}/pid").json() for _ in range(10)}
    assert victim["pid"] not in pids and len(pids) >= 1
    assert serve.status().applications["pid"].status == "RUNNING"
    serve.delete("pid")


def test_failed_health_check_replaces_the_replica(serve_instance):
    serve, url = serve_instance

    @serve.deployment(health_check_period_s=0.2, health_check_timeout_s=5)
    class Sick:
        def __init__(self) -> None:
            self.sick = False

        def check_health(self) -> None:
            if self.sick:
                raise RuntimeError("lost my GPU")

        def __call__(self, request) -> str:
            if request.query_params.get("sick"):
                self.sick = True
            return "ok"

    serve.run(Sick.bind(), name="sick", route_prefix="/sick")
    first = _replicas("sick", "Sick")[0]["replica_id"]
    assert httpx.get(f"{url}/sick?sick=1").text == "ok"
    wait_for(lambda: any(r["replica_id"] != first and r["state"] == "RUNNING" for r in _replicas("sick", "Sick")),
             timeout_s=30, what="replacement after a failed health check")
    wait_for(lambda: httpx.get(f"{url}/sick").status_code == 200, timeout_s=10, what="app serving again")
    serve.delete("sick")


def test_killed_controller_comes_back_and_adopts_replicas(serve_instance):
    serve, url = serve_instance

    @serve.deployment(num_replicas=2)
    def steady(request) -> str:
        return "steady"

    serve.run(steady.bind(), name="steady", route_prefix="/steady")
    before = {r["replica_id"] for r in _replicas("steady", "steady")}
    raylite.kill(get_controller(), no_restart=False)
    # traffic does not depend on the controller
    assert httpx.get(f"{url}/steady").text == "steady"

    def adopted() -> bool:
        try:
            return {r["replica_id"] for r in _replicas("steady", "steady") if r["state"] == "RUNNING"} == before
        except Exception:  # noqa: BLE001 - restarting
            return False

    wait_for(adopted, timeout_s=30, what="the restarted controller to adopt the running replicas")
    assert serve.status().applications["steady"].status == "RUNNING"
    assert httpx.get(f"{url}/steady").text == "steady"

    @serve.deployment
    def later(request) -> str:
        return "deployed after the restart"

    serve.run(later.bind(), name="later", route_prefix="/later")  # the proxy learns the new route
    wait_for(lambda: httpx.get(f"{url}/later").status_code == 200, timeout_s=10, what="the new route")
    assert httpx.get(f"{url}/later").text == "deployed after the restart"
    serve.delete("later")
    serve.delete("steady")


def test_graceful_shutdown_calls_del(serve_instance, tmp_path):
    serve, url = serve_instance
    marker = tmp_path / "deleted"

    @serve.deployment(graceful_shutdown_timeout_s=5)
    class Tidy:
        def __init__(self, path: str) -> None:
            self.path = path

        def __call__(self, request) -> str:
            return "ok"

        def __del__(self) -> None:
            with open(self.path, "w") as f:
                f.write("bye")

    serve.run(Tidy.bind(str(marker)), name="tidy", route_prefix="/tidy")
    assert httpx.get(f"{url}/tidy").text == "ok"
    serve.delete("tidy")
    assert marker.read_text() == "bye"
