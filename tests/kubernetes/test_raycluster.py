"""A RayCluster: KubeRay's head and worker pods pass their probes and form one cluster; `--block`
ends the container when the node dies and stops the node cleanly on SIGTERM."""

from __future__ import annotations

import json

import pytest

from .conftest import RayClusterPods
from .pods import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(hosts, tmp_path_factory):
    c = RayClusterPods(hosts, str(tmp_path_factory.mktemp("raycluster")))
    try:
        yield c
    finally:
        c.stop()


def test_pods_pass_every_probe_within_30s_and_form_one_cluster(cluster):
    cluster.start_head()
    cluster.start_worker(0)  # after its wait-gcs-ready init container (`ray health-check`) succeeded
    try:
        cluster.wait_ready(timeout_s=30.0)
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    # `ray start` printed nothing that says a KubeRay flag was ignored
    for log in (cluster.head.log("head.log"), cluster.workers[0].log("worker.log")):
        for flag in ("--dashboard-agent-listen-port", "--metrics-export-port", "--memory", "--block"):
            assert f"{flag} has no effect" not in log
    out = cluster.driver("""
import json
from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()  # RAY_ADDRESS=127.0.0.1:6379, as KubeRay sets it in the head pod
nodes = [n for n in ray.nodes() if n["Alive"]]
@ray.remote
def where():
    return ray.util.get_node_ip_address()
ips = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
               for n in nodes])
print("RESULT " + json.dumps({"nodes": len(nodes), "ips": sorted(ips), "cpus": ray.cluster_resources()["CPU"],
                              "memory": ray.cluster_resources()["memory"]}))
""")
    assert out.returncode == 0, out.stderr + cluster.logs()
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert result["nodes"] == 2
    assert result["ips"] == sorted([cluster.head.ip, cluster.workers[0].ip])  # each pod found its own IP
    assert result["cpus"] == cluster.head_cpus + cluster.worker_cpus
    assert result["memory"] == (2 << 30) + (1 << 30)  # --memory from the containers' limits


def test_metrics_export_port_serves_the_node_metrics_with_the_token(cluster):
    import urllib.request

    from .kuberay import METRICS_PORT

    req = urllib.request.Request(f"http://{cluster.workers[0].ip}:{METRICS_PORT}/metrics",
                                 headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = r.read().decode()
    assert f'node_ip="{cluster.workers[0].ip}"' in body and "raylite_node_up{" in body


def test_block_exits_nonzero_when_the_node_dies_and_zero_on_sigterm(cluster):
    worker = cluster.workers[0]
    container = worker.procs[-1]
    assert container.poll() is None
    # the node daemon dies (OOM-killed, say): `ray start --block` must end the container
    killed = worker.run("pkill -KILL -f raylite._core.cluster.daemon", login=False)
    assert killed.returncode == 0
    assert wait_for(lambda: container.poll() is not None, 30, "the worker container to exit")
    assert container.returncode != 0
    assert "exited" in worker.log("worker.log")
    wait_for(lambda: not cluster.probes_pass(worker, "worker"), 10, "the dead worker's probe to fail")
    # kubelet restarts the container; then stops the pod with SIGTERM: a clean stop, exit 0
    worker.start(cluster.worker_command_args(), cluster.worker_env(0), "worker2.log")
    container = worker.procs[-1]
    wait_for(lambda: cluster.probes_pass(worker, "worker"), 30, "the restarted worker's probes")
    term = worker.run("pkill -TERM -f ' start .*--block'", login=False)  # the CLI, not the daemon
    assert term.returncode == 0, term.stderr
    assert wait_for(lambda: container.poll() is not None, 30, "the worker container to stop")
    assert container.returncode == 0, worker.log("worker2.log")
    gone = worker.run("pgrep -f raylite._core.cluster.daemon", login=False)
    assert gone.returncode == 1  # no node daemon left in the pod


def test_a_pod_without_the_token_is_told_why_it_cannot_join(cluster):
    """KubeRay's default (no authOptions) gives pods no token: the worker's init container says
    why, instead of the worker crash-looping."""
    worker = cluster.workers[0]
    out = worker.run(f"ray health-check --address {cluster.fqdn}:6379", {}, timeout=60)
    assert out.returncode == 1
    assert "refused this command's token" in out.stderr and "RAY_AUTH_TOKEN" in out.stderr
