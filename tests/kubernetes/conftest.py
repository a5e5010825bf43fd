"""KubeRay's contract on network-namespace pods (root only; skipped cleanly otherwise).

No Kubernetes API server can run here, so the tests play the operator's and kubelet's part:
they build each pod's command, environment and probes exactly as KubeRay does (kuberay.py),
run them in pods made of network-namespace hosts with private mount namespaces (pods.py), and
check the outcomes KubeRay waits for (probes pass, jobs SUCCEEDED, Serve answers)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import urllib.request

import pytest

from .kuberay import (
    AGENT_PORT,
    HTTP_PROBE_PATH,
    container_args,
    container_env,
    head_service_fqdn,
    probe_commands,
    ray_start_command,
    wait_gcs_ready_script,
)
from .pods import TOOL, Pod, nh, uses_compat_ray, wait_for

_MODULES = itertools.count()
RAY_IMPORT = "import ray" if uses_compat_ray() else "import raylite as ray"


def _skip_reason() -> str:
    if os.geteuid() != 0:
        return "tests/kubernetes need root (network namespaces, private mount namespaces)"
    if not os.path.exists(TOOL):
        return f"netns-hosts not found at {TOOL} (set NETNS_HOSTS)"
    for tool in ("unshare", "wget", "mount"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    rc = subprocess.run([TOOL, "check"], capture_output=True, text=True)
    if rc.returncode == 77:
        return "netns-hosts unavailable: " + (rc.stderr.strip() or rc.stdout.strip())
    return ""


def auth_env(token: str) -> dict[str, str]:
    """KubeRay's `authOptions.mode: token`: RAY_AUTH_MODE and RAY_AUTH_TOKEN (from a Secret) in
    every container (common/pod.go configureTokenAuth)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


@pytest.fixture(scope="module")
def hosts():
    why = _skip_reason()
    if why:
        pytest.skip(why)
    prefix = f"kr{os.getpid() % 10000}{'abcdefghijklmnopqrstuvwxyz'[next(_MODULES) % 26]}"
    out = nh("up", "3", "--prefix", prefix)
    ips = dict(line.split() for line in out.splitlines())
    try:
        yield [(name, ips[name]) for name in sorted(ips)]
    finally:
        nh("down", "--prefix", prefix, timeout=120)


class RayClusterPods:
    """One RayCluster: a head pod, worker pods, and the test as its operator and kubelet."""

    def __init__(self, hosts, root: str, *, name: str = "raycluster-kr", namespace: str = "default",
                 token: str = "kr-test-token-0123456789abcdef", head_cpus: int = 2, worker_cpus: int = 1,
                 service: bool = False) -> None:
        self.name, self.namespace, self.token = name, namespace, token
        self.fqdn = head_service_fqdn(name, namespace)
        self.head_host, self.worker_hosts = hosts[0], hosts[1:]
        self.root = root
        self.head_cpus, self.worker_cpus, self.service = head_cpus, worker_cpus, service
        self.pods: list[Pod] = []
        self.head: Pod | None = None
        self.workers: list[Pod] = []

    def pod(self, name: str, host: tuple[str, str]) -> Pod:
        p = Pod(name, host[0], host[1], os.path.join(self.root, name), {self.fqdn: self.head_host[1]})
        self.pods.append(p)
        return p

    def head_command(self, params: dict | None = None) -> str:
        return ray_start_command("head", params or {}, num_cpus=self.head_cpus, memory_bytes=2 << 30)

    def worker_command(self, params: dict | None = None) -> str:
        return ray_start_command("worker", params or {}, num_cpus=self.worker_cpus, memory_bytes=1 << 30,
                                 fqdn=self.fqdn)

    def head_env(self, extra: dict | None = None, params: dict | None = None) -> dict[str, str]:
        env = container_env("head", cluster=self.name, namespace=self.namespace, pod_name=f"{self.name}-head",
                            group="headgroup", start_cmd=self.head_command(params), service=self.service)
        return {**env, **auth_env(self.token), **(extra or {})}

    def worker_env(self, i: int = 0, extra: dict | None = None) -> dict[str, str]:
        env = container_env("worker", cluster=self.name, namespace=self.namespace,
                            pod_name=f"{self.name}-worker-{i}", group="workergroup",
                            start_cmd=self.worker_command(), service=self.service)
        return {**env, **auth_env(self.token), **(extra or {})}

    def start_head(self, extra_env: dict | None = None, params: dict | None = None) -> Pod:
        if self.head is None:
            self.head = self.pod(f"{self.name}-head", self.head_host)
        self.head.start(container_args(self.head_command(params)), self.head_env(extra_env, params), "head.log")
        return self.head

    def start_worker(self, i: int = 0, extra_env: dict | None = None) -> Pod:
        pod = self.pod(f"{self.name}-worker-{i}", self.worker_hosts[i])
        init = pod.run(wait_gcs_ready_script(self.fqdn), self.worker_env(i, extra_env), timeout=150)
        assert init.returncode == 0 and "GCS is ready." in init.stdout, (init.stdout, init.stderr)
        pod.start(container_args(self.worker_command()), self.worker_env(i, extra_env), "worker.log")
        self.workers.append(pod)
        return pod

    def worker_command_args(self) -> str:
        return container_args(self.worker_command())

    def probes_pass(self, pod: Pod, node_type: str, serve_worker: bool = False) -> bool:
        if not pod.probe(probe_commands(node_type, serve_worker=serve_worker)):
            return False
        try:  # the Ray >= 2.53 form: kubelet's httpGet on the pod IP
            with urllib.request.urlopen(f"http://{pod.ip}:{AGENT_PORT}{HTTP_PROBE_PATH}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        wait_for(lambda: self.probes_pass(self.head, "head"), timeout_s, "the head pod's probes",
                 interval_s=0.5)
        for w in self.workers:
            wait_for(lambda w=w: self.probes_pass(w, "worker"), timeout_s, f"{w.name}'s probes", interval_s=0.5)

    def driver(self, script: str, pod: Pod | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """`kubectl exec <pod> -- python3 -c <script>` in the head pod (RAY_ADDRESS points at the head)."""
        pod = pod or self.head
        env = self.head_env() if pod is self.head else self.worker_env(self.workers.index(pod))
        path = os.path.join(pod.tmp, f"driver_{abs(hash(script))}.py")
        with open(path, "w") as f:
            f.write(RAY_IMPORT + "\n" + script)
        return pod.run(f"python3 /tmp/{os.path.basename(path)}", env, timeout=timeout)

    def stop(self) -> None:
        for p in reversed(self.pods):
            p.stop()

    def logs(self) -> str:
        out = []
        for p in self.pods:
            for name in ("head.log", "worker.log"):
                text = p.log(name)
                if text:
                    out.append(f"----- {p.name} {name}\n{text[-3000:]}")
        return "\n".join(out)
