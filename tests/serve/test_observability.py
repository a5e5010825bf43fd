"""Metrics snapshot in the KV, access logs per LoggingConfig, and autoscaling end to end."""

import asyncio
import glob
import json
import os
import tempfile

import httpx
import pytest

import raylite
from raylite.experimental.internal_kv import _internal_kv_get
from raylite.serve._internal.client import get_controller
from tests.conftest import wait_for


def test_snapshot_and_access_log(serve_instance):
    serve, url = serve_instance
    logs_dir = tempfile.mkdtemp(prefix="serve-logs-")

    @serve.deployment(num_replicas=2, logging_config={"encoding": "JSON", "logs_dir": logs_dir})
    def metered(request) -> str:
        if request.query_params.get("fail"):
            raise RuntimeError("boom")
        return "ok"

    serve.run(metered.bind(), name="metered", route_prefix="/metered")
    for _ in range(20):
        assert httpx.get(f"{url}/metered").status_code == 200
    assert httpx.get(f"{url}/metered?fail=1", headers={"x-request-id": "req-fail"}).status_code == 500

    def snapshot():
        raw = _internal_kv_get("snapshot", namespace="serve")
        if not raw:
            return None
        dep = json.loads(raw)["applications"].get("metered", {}).get("deployments", {}).get("metered")
        return dep if dep and dep["requests_total"] >= 21 else None

    dep = wait_for(snapshot, timeout_s=20, what="metrics in the serve snapshot")
    assert dep["errors_total"] >= 1 and dep["status"] == "HEALTHY"
    assert len(dep["replicas"]) == 2 and all(r["pid"] and r["node_id"] for r in dep["replicas"])
    assert dep["p50_ms"] > 0 and dep["p99_ms"] >= dep["p50_ms"]

    def access_lines():
        lines = []
        for path in glob.glob(os.path.join(logs_dir, "replica_metered_metered_*.log")):
            with open(path) as f:
                lines += [json.loads(x) for x in f if x.strip()]
        return lines if any(x.get("request_id") == "req-fail" for x in lines) else None

    serve.delete("metered")  # replicas flush their log files on shutdown
    lines = wait_for(access_lines, timeout_s=20, what="access log lines")
    failed = [x for x in lines if x.get("request_id") == "req-fail" and "status" in x]
    assert failed and failed[0]["status"] == 500 and failed[0]["deployment"] == "metered"
    assert sum(1 for x in lines if x.get("status") == 200) >= 20


@pytest.mark.slow
def test_autoscaling_scales_up_under_load_and_down_when_idle(serve_instance):
    serve, _url = serve_instance

    @serve.deployment(max_ongoing_requests=2, autoscaling_config={
        "min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 1, "upscale_delay_s": 0.5,
        "downscale_delay_s": 2, "metrics_interval_s": 0.5, "look_back_period_s": 1.5})
    class Elastic:
        def __init__(self, gate: str) -> None:
            self.gate = gate

        async def work(self) -> str:
            for _ in range(1200):  # the test opens the gate (a file) once it saw the scale-up
                if os.path.exists(self.gate):
                    return "done"
                await asyncio.sleep(0.05)
            return "gate never opened"

    gate = os.path.join(tempfile.mkdtemp(), "gate")
    handle = serve.run(Elastic.bind(gate), name="elastic", route_prefix=None)

    def running() -> int:
        reps = raylite.get(get_controller().list_replicas.remote("elastic", "Elastic"))
        return sum(1 for r in reps if r["state"] == "RUNNING")

    assert running() == 1
    pending = [handle.work.remote() for _ in range(6)]
    wait_for(lambda: running() == 3, timeout_s=60, what="scale up to 3 replicas")
    open(gate, "w").close()
    assert [p.result(timeout_s=60) for p in pending] == ["done"] * 6
    wait_for(lambda: running() == 1, timeout_s=60, what="scale back down to 1 replica")
    serve.delete("elastic")
