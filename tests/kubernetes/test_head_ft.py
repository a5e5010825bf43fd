"""GCS fault tolerance as KubeRay configures it (gcsFaultToleranceOptions: RAY_REDIS_ADDRESS,
REDIS_PASSWORD / `--redis-password=$REDIS_PASSWORD`, RAY_external_storage_namespace): the head
pod is killed and restarted, Serve keeps answering on the worker's :8000 meanwhile, and the
restarted head recovers the cluster from Redis (Debian's redis-server, run in a pod of its own)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request

import pytest

from .conftest import RayClusterPods
from .kuberay import SERVE_PORT, gcs_ft_env
from .pods import Pod, wait_for

pytestmark = pytest.mark.slow

REDIS_PASSWORD = "kr-redis-pw"
HEAD_PARAMS = {"redis-password": "$REDIS_PASSWORD"}  # what configureGCSFaultTolerance adds
WORKER_PARAMS = {"resources": "'{\"serve_worker\":1}'"}  # KubeRay's quoting of rayStartParams.resources


@pytest.fixture(scope="module")
def redis(hosts, tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    pod = Pod("redis", hosts[2][0], hosts[2][1], str(tmp_path_factory.mktemp("redis")))
    pod.start(f"exec redis-server --bind {pod.ip} --port 6379 --requirepass {REDIS_PASSWORD} --save '' "
              "--appendonly no --protected-mode no", {}, "redis.log")
    wait_for(lambda: pod.probe(f"exec 3<>/dev/tcp/{pod.ip}/6379"), 20, "redis-server to listen")
    try:
        yield f"{pod.ip}:6379"
    finally:
        pod.stop()


@pytest.fixture(scope="module")
def cluster(hosts, redis, tmp_path_factory):
    c = RayClusterPods(hosts[:2], str(tmp_path_factory.mktemp("headft")), service=True)
    c.ft_env = gcs_ft_env("head", redis_address=redis, redis_password=REDIS_PASSWORD,
                          storage_namespace="0f2b7c1e-kr-uid")
    worker_cmd = c.worker_command
    c.worker_command = lambda params=None: worker_cmd({**WORKER_PARAMS, **(params or {})})
    try:
        c.start_head(c.ft_env, HEAD_PARAMS)
        c.start_worker(0, gcs_ft_env("worker", redis_address="", redis_password="", storage_namespace=""))
        c.wait_ready(timeout_s=30.0)
        yield c
    finally:
        c.stop()


def _serve_get(ip: str, path: str = "/") -> str | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{SERVE_PORT}{path}", timeout=3) as r:
            return r.read().decode()
    except OSError:
        return None


def test_serve_keeps_answering_while_the_head_restarts_and_the_cluster_recovers(cluster):
    deploy = cluster.driver("""
from raylite import serve
ray.init()
serve.start(http_options={"host": "0.0.0.0", "port": 8000})

@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0, "resources": {"serve_worker": 0.1}})
class Echo:
    def __call__(self, request):
        return "echo from " + ray.util.get_node_ip_address()

serve.run(Echo.bind(), name="echo", route_prefix="/")
ray.get(ray.put(1))
print("DEPLOYED")
""", timeout=180)
    assert deploy.returncode == 0 and "DEPLOYED" in deploy.stdout, deploy.stdout + deploy.stderr + cluster.logs()
    worker = cluster.workers[0]
    assert wait_for(lambda: _serve_get(worker.ip), 60, "Serve on the worker's :8000") == f"echo from {worker.ip}"
    # the worker's Serve readiness probe (RayService workers) passes too
    assert cluster.probes_pass(worker, "worker", serve_worker=True)

    cluster.head.kill()  # the head pod dies
    down_since = time.monotonic()
    answered = 0
    while time.monotonic() - down_since < 8.0:  # Serve's data plane on the worker needs no head
        assert _serve_get(worker.ip) == f"echo from {worker.ip}"
        answered += 1
    assert answered > 0

    cluster.start_head(cluster.ft_env, HEAD_PARAMS)  # kubelet restarts the head container
    try:
        cluster.wait_ready(timeout_s=60.0)
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    assert _serve_get(worker.ip) == f"echo from {worker.ip}"
    check = cluster.driver("""
import json
from raylite import serve
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
status = serve.status()
print("RESULT " + json.dumps({"alive": len(alive), "app": status.applications["echo"].status.value
                              if hasattr(status.applications["echo"].status, "value")
                              else str(status.applications["echo"].status)}))
""", timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr + cluster.logs()
    result = json.loads(check.stdout.split("RESULT ", 1)[1])
    assert result == {"alive": 2, "app": "RUNNING"}
    # the tables are in Redis under the cluster's namespace (RAY_external_storage_namespace)
    keys = subprocess.run(["redis-cli", "-h", cluster.ft_env["RAY_REDIS_ADDRESS"].split(":")[0], "-a",
                           REDIS_PASSWORD, "--no-auth-warning", "keys", "*"], capture_output=True, text=True)
    if keys.returncode == 0:  # redis-cli reaches the redis pod from the machine (the bridge)
        assert any("0f2b7c1e-kr-uid" in k for k in keys.stdout.split())
