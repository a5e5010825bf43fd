"""`raylite kuberay-autoscaler` against a fake Kubernetes API (fake_kube.py), the test playing
KubeRay's operator: pods are worker node daemons on loopback addresses 127.0.0.x (each pod its
own IP, as on Kubernetes), started when replicas go up and stopped when named in
workersToDelete."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from raylite.autoscaler.providers.kube_api import KubeAPI, KubernetesAPIError
from raylite.autoscaler.providers.kuberay import KubeRayProvider, group_resources, parse_quantity

from .conftest import ROOT, start_worker, stop_worker, wait_until
from .fake_kube import FakeKube, apply_json_patch, make_ca

TOKEN = "sa-token-for-tests"


def raycluster(idle_s: int = 60, replicas: int = 0, max_replicas: int = 5, **extra_group) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ns"},
            "spec": {"autoscalerOptions": {"idleTimeoutSeconds": idle_s, "upscalingMode": "Default"},
                     "headGroupSpec": {"rayStartParams": {"num-cpus": "0"}},
                     "workerGroupSpecs": [
                         {"groupName": "gpu", "replicas": 0, "minReplicas": 0, "maxReplicas": 1,
                          "rayStartParams": {}, "template": {"spec": {"containers": [
                              {"name": "ray-worker", "resources": {"limits": {
                                  "cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}}]}}},
                         {"groupName": "small", "replicas": replicas, "minReplicas": 0,
                          "maxReplicas": max_replicas, "rayStartParams": {"num-cpus": "1"},
                          "template": {"spec": {"containers": [{"name": "ray-worker"}]}}, **extra_group}]}}


@pytest.fixture
def kube(tmp_path):
    cert, key, sa = make_ca(str(tmp_path / "kube"), TOKEN)
    fake = FakeKube(raycluster(), TOKEN, cert, key)
    fake.sa_dir = sa
    try:
        yield fake
    finally:
        fake.close()


def test_quantities_and_group_resources():
    assert parse_quantity("500m") == 0.5 and parse_quantity("4Gi") == 4 * 2**30 and parse_quantity(2) == 2
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("lots")
    cr = raycluster()
    assert group_resources(cr["spec"]["workerGroupSpecs"][0]) == {"CPU": 8, "GPU": 1, "memory": 32 * 2**30}
    params = {"num-cpus": "2", "resources": '"{\\"Custom\\": 3}"', "memory": "1000"}
    assert group_resources({"rayStartParams": params}) == {"CPU": 2, "Custom": 3, "memory": 1000}
    assert group_resources({"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "1500m"}}}]}}}) \
        == {"CPU": 2}  # rounded up, as `ray start` would offer whole CPUs


def test_provider_reads_the_raycluster_and_patches_it(kube):
    api = KubeAPI(kube.url, kube.sa_dir)
    p = KubeRayProvider("rc", "ns", api)
    p.refresh()
    assert [(t.name, dict(t.resources), t.max_workers) for t in p.node_types()] == [
        ("gpu", {"CPU": 8, "GPU": 1, "memory": 32 * 2**30}, 1), ("small", {"CPU": 1}, 5)]
    assert p.idle_timeout_s() == 60 and p.upscaling_speed() == 1000
    p.create_nodes("small", 2)
    assert kube.patches[-1] == [{"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 2}]
    p.refresh()
    # replicas the operator has not made pods for yet count as launching nodes
    assert [n.node_type for n in p.non_terminated_nodes()] == ["small", "small"]
    kube.add_pod("rc-small-a", "small", "10.1.0.1")
    kube.add_pod("rc-small-b", "small", "10.1.0.2")
    p.refresh()
    assert {n.node_id: n.ip for n in p.non_terminated_nodes()} == {"rc-small-a": "10.1.0.1", "rc-small-b": "10.1.0.2"}
    assert p.matches(p.non_terminated_nodes()[0], {"ip": "10.1.0.1"})
    p.terminate_nodes(["rc-small-b"])
    assert kube.patches[-1] == [
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 1},
        {"op": "add", "path": "/spec/workerGroupSpecs/1/scaleStrategy", "value": {"workersToDelete": ["rc-small-b"]}}]
    p.refresh()
    assert not p.ready()  # the pod named in workersToDelete still exists: no scaling now
    assert [n.node_id for n in p.non_terminated_nodes()] == ["rc-small-a"]
    kube.delete_pod("rc-small-b")
    p.refresh()
    assert p.ready()
    p.terminate_nodes(["rc-small-a"])  # scaleStrategy exists now: its list is set
    assert kube.patches[-1][1] == {"op": "add", "path": "/spec/workerGroupSpecs/1/scaleStrategy/workersToDelete",
                                   "value": ["rc-small-a"]}


def test_only_tls_with_the_given_ca_and_the_token(kube, tmp_path):
    with pytest.raises(KubernetesAPIError, match="https://"):
        KubeAPI("http" + kube.url[5:], kube.sa_dir)
    # a wrong token: the server refuses, the error says so
    bad_sa = tmp_path / "bad"
    bad_sa.mkdir()
    (bad_sa / "ca.crt").write_bytes(open(os.path.join(kube.sa_dir, "ca.crt"), "rb").read())
    (bad_sa / "token").write_text("wrong")
    with pytest.raises(KubernetesAPIError, match="HTTP 401") as e:
        KubeRayProvider("rc", "ns", KubeAPI(kube.url, str(bad_sa))).refresh()
    assert e.value.status == 401
    # another CA: the server's certificate is not trusted, nothing is sent
    _, _, other_sa = make_ca(str(tmp_path / "other"), TOKEN)
    before = len(kube.patches)
    with pytest.raises(KubernetesAPIError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        KubeRayProvider("rc", "ns", KubeAPI(kube.url, other_sa)).create_nodes("small", 1)
    assert len(kube.patches) == before


def test_json_patch_of_the_fake_server_refuses_what_kubernetes_would():
    with pytest.raises(KeyError):
        apply_json_patch({"spec": {}}, [{"op": "replace", "path": "/spec/missing", "value": 1}])


class Operator:
    """KubeRay's part: pods for replicas, deletion of the pods named in workersToDelete."""

    def __init__(self, kube: FakeKube, head) -> None:
        self.kube, self.head = kube, head
        self.procs: dict[str, subprocess.Popen] = {}
        self.ips: dict[str, str] = {}
        self.deleted: list[str] = []
        self.created = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while not self.stop.wait(0.1):
                g = self.kube.group("small")
                for name in list((g.get("scaleStrategy") or {}).get("workersToDelete") or []):
                    if name in self.procs:
                        stop_worker(self.procs.pop(name))
                    self.kube.delete_pod(name)
                    self.deleted.append(name)
                while len(self.procs) < int(g.get("replicas") or 0):
                    self.created += 1
                    name, ip = f"rc-small-{self.created}", f"127.0.0.{40 + self.created}"
                    self.kube.add_pod(name, "small", ip)
                    self.procs[name] = start_worker(self.head, name, ip)
                    self.ips[name] = ip
        except BaseException as e:  # noqa: BLE001  the test reports it
            self.error = e

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        for p in self.procs.values():
            stop_worker(p)


@pytest.mark.slow
def test_demand_for_three_cpus_scales_the_raycluster_up_then_idle_pods_are_deleted(head, kube):
    import raylite

    kube.raycluster["spec"]["autoscalerOptions"]["idleTimeoutSeconds"] = 3
    operator = Operator(kube, head)
    env = {**os.environ, "RAYLITE_TOKEN": head.token, "PYTHONPATH": ROOT}
    log = open(os.path.join(head.tmp, "autoscaler.log"), "wb")
    scaler = subprocess.Popen(
        [sys.executable, "-m", "raylite.cli", "kuberay-autoscaler", "--cluster-name", "rc",
         "--cluster-namespace", "ns", f"--address={head.address}", f"--kube-api-server={kube.url}",
         f"--service-account-dir={kube.sa_dir}", "--interval-s=0.5"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # the autoscaler published its node types: a 1-CPU task now waits for a node, while a
        # request no worker group could ever fit still fails at once
        from raylite._core.cluster import cluster as C

        wait_until(lambda: (C.cluster_status(head.config, head.address).get("autoscaler") or {}).get("node_types"),
                   30, "the autoscaler's view")
        raylite.init(address=head.address)

        @raylite.remote(num_cpus=1)
        def where(delay_s: float) -> str:
            import time

            time.sleep(delay_s)
            return raylite.util.get_node_ip_address()

        with pytest.raises(Exception, match="cannot be scheduled|no node"):
            raylite.get(where.options(num_gpus=2).remote(0), timeout=30)

        ips = raylite.get([where.remote(2.0) for _ in range(3)], timeout=120)
        # scaled up by replacing the small group's replicas (in one patch, or more if a round
        # saw only part of the burst), to 3 and no further
        ups = [ops for ops in kube.patches if len(ops) == 1]
        assert ups and all(ops[0]["op"] == "replace" and ops[0]["path"] == "/spec/workerGroupSpecs/1/replicas"
                           for ops in ups)
        assert max(ops[0]["value"] for ops in ups) == 3
        assert set(ips) <= set(operator.ips.values()) and len(operator.ips) == 3
        # idle past the timeout: the three pods are named in workersToDelete and deleted
        named = set()

        def all_named():
            for ops in kube.patches:
                for op in ops:
                    v = op["value"]
                    named.update(v.get("workersToDelete", []) if isinstance(v, dict) else
                                 v if isinstance(v, list) else [])
            return named == set(operator.ips)

        wait_until(all_named, 60, "the idle pods named in workersToDelete")
        wait_until(lambda: sorted(operator.deleted) == sorted(operator.ips), 60, "the operator deleting them")
        assert kube.group("small")["replicas"] == 0
        assert operator.error is None
        text = C.format_status(C.cluster_status(head.config, head.address))
        assert "Autoscaler" in text and "pending launches" in text
    finally:
        scaler.terminate()
        scaler.wait(30)
        log.close()
        operator.close()


def test_the_ray_command_has_kuberay_autoscaler_and_it_fails_clearly_outside_a_pod(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["PYTHONPATH"] = ROOT
    try:
        import ray  # noqa: F401  compat/ray: the `ray` command is raylite's CLI
    except ImportError:
        pytest.skip("compat/ray (the `ray` command) is not installed")
    out = subprocess.run([sys.executable, "-c", "import sys, ray; sys.argv = ['ray', 'kuberay-autoscaler', "
                          "'--help']; ray._cli_main()"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--cluster-namespace" in out.stdout
    out = subprocess.run([sys.executable, "-m", "raylite.cli", "kuberay-autoscaler", "--cluster-name", "rc",
                          "--cluster-namespace", "ns", "--once"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "KUBERNETES_SERVICE_HOST is not set" in out.stderr
    out = subprocess.run([sys.executable, "-m", "raylite.cli", "kuberay-autoscaler", "--cluster-name", "rc",
                          "--cluster-namespace", "ns", "--once", "--kube-api-server=https://127.0.0.1:1",
                          f"--service-account-dir={tmp_path}"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no service-account token and CA" in out.stderr
