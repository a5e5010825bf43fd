"""The local node provider: starts and stops raylite node daemons on a fixed list of hosts,
the way `ray up` with a `local` provider manages a set of machines it was given.

Config (a dict, or the YAML file `raylite autoscaler --config` reads)::

    cluster_name: demo
    head_address: 10.0.0.1:6379          # HOST:PORT the nodes join
    idle_timeout_s: 60                   # or Ray's idle_timeout_minutes
    upscaling_speed: 1.0
    state_dir: /tmp/raylite-autoscaler   # per-node temp dirs and logs
    available_node_types:
      cpu_worker:
        resources: {CPU: 2}
        min_workers: 0
        max_workers: 2
        worker_ips: [10.0.0.2, 10.0.0.3]   # hosts this type may use; one node per host
    # a host may also be {name: h1, ip: 10.0.0.2, command_prefix: [ssh, 10.0.0.2]}: the
    # prefix runs the node's command on that host (ssh, `netns-hosts exec NAME --`, ...)

Each node runs `python -m raylite.cli start --address HEAD --block` on its host with its own
RAYLITE_TEMP_DIR and the label `raylite.io/autoscaler-node=<host name>`, by which it is matched
to its raylite node. Terminating runs `raylite stop` on that host with the same temp dir (it
stops that node's processes only), then waits for the starting process.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raylite.autoscaler.policy import NodeType
from raylite.autoscaler.providers.base import ProviderNode

NODE_LABEL = "raylite.io/autoscaler-node"
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    command_prefix: tuple[str, ...] = ()


@dataclass
class _Running:
    host: Host
    node_type: str
    process: subprocess.Popen
    log_path: str
    temp_dir: str


@dataclass
class LocalConfig:
    head_address: str
    node_types: list[NodeType]
    hosts: dict[str, list[Host]]  # node type -> its hosts
    idle_timeout_s: float | None = None
    upscaling_speed: float = 1.0
    state_dir: str = "/tmp/raylite-autoscaler"
    token: str = ""
    start_args: dict[str, list[str]] = field(default_factory=dict)


def load_config(raw: Mapping[str, Any]) -> LocalConfig:
    """Check a local-provider config and name what is wrong (with the fix)."""
    if not isinstance(raw, Mapping):
        raise ValueError("the autoscaler config must be a mapping (YAML/JSON object)")
    provider = raw.get("provider") or {}
    if provider and provider.get("type", "local") != "local":
        raise ValueError(f"provider.type {provider.get('type')!r} is not supported here: use `local` "
                         "(or `raylite kuberay-autoscaler` on Kubernetes)")
    head = raw.get("head_address") or provider.get("head_address") or ""
    if not head:
        raise ValueError("the config needs head_address: HOST:PORT of the head the nodes join")
    types_raw = raw.get("available_node_types")
    if not isinstance(types_raw, Mapping) or not types_raw:
        raise ValueError("the config needs available_node_types: {name: {resources: {...}, max_workers: N, "
                         "worker_ips: [...]}}")
    shared_hosts = provider.get("worker_ips") or []
    types, hosts, start_args = [], {}, {}
    for name, t in types_raw.items():
        if not isinstance(t, Mapping) or not isinstance(t.get("resources"), Mapping):
            raise ValueError(f"node type {name!r} needs resources: {{CPU: N, ...}}")
        host_list = [_host(h) for h in (t.get("worker_ips") or shared_hosts)]
        max_workers = int(t.get("max_workers", len(host_list)))
        if max_workers > len(host_list):
            raise ValueError(f"node type {name!r} has max_workers {max_workers} but only {len(host_list)} "
                             "worker_ips: list a host per node")
        min_workers = int(t.get("min_workers", 0))
        if not 0 <= min_workers <= max_workers:
            raise ValueError(f"node type {name!r}: min_workers {min_workers} must be within 0..max_workers")
        types.append(NodeType(str(name), {str(k): float(v) for k, v in t["resources"].items()},
                              min_workers, max_workers, t.get("cost")))
        hosts[str(name)] = host_list
        start_args[str(name)] = [str(a) for a in t.get("start_args") or []]
    idle = raw.get("idle_timeout_s")
    if idle is None and raw.get("idle_timeout_minutes") is not None:
        idle = float(raw["idle_timeout_minutes"]) * 60
    return LocalConfig(str(head), types, hosts, None if idle is None else float(idle),
                       float(raw.get("upscaling_speed", 1.0)), str(raw.get("state_dir") or "/tmp/raylite-autoscaler"),
                       str(raw.get("token") or ""), start_args)


def _host(h: Any) -> Host:
    if isinstance(h, str):
        return Host(h, h)
    if isinstance(h, Mapping) and h.get("ip"):
        prefix = h.get("command_prefix") or ()
        if isinstance(prefix, str):
            prefix = shlex.split(prefix)
        return Host(str(h.get("name") or h["ip"]), str(h["ip"]), tuple(str(p) for p in prefix))
    raise ValueError(f"a worker host is an IP or {{name, ip, command_prefix}}, not {h!r}")


class LocalProvider:
    def __init__(self, config: LocalConfig | Mapping[str, Any]) -> None:
        self.config = config if isinstance(config, LocalConfig) else load_config(config)
        self.nodes: dict[str, _Running] = {}  # host name -> its node
        self.failures: list[str] = []  # nodes that exited on their own, with their log's tail

    def node_types(self) -> list[NodeType]:
        return list(self.config.node_types)

    def idle_timeout_s(self) -> float | None:
        return self.config.idle_timeout_s

    def ready(self) -> bool:
        return True

    def upscaling_speed(self) -> float:
        return self.config.upscaling_speed

    def non_terminated_nodes(self) -> list[ProviderNode]:
        for name, r in list(self.nodes.items()):
            if r.process.poll() is not None:  # it exited by itself (failed to join, was killed)
                self.failures.append(f"node on {name} exited ({r.process.returncode}): {_tail(r.log_path)}")
                del self.nodes[name]
        return [ProviderNode(name, r.node_type, r.host.ip, {NODE_LABEL: name}) for name, r in self.nodes.items()]

    def matches(self, node: ProviderNode, raylite_node: Mapping[str, Any]) -> bool:
        return (raylite_node.get("labels") or {}).get(NODE_LABEL) == node.node_id

    def create_nodes(self, node_type: str, count: int) -> None:
        free = [h for h in self.config.hosts.get(node_type, []) if h.name not in self.nodes]
        for host in free[:count]:
            self._start(host, node_type)

    def _start(self, host: Host, node_type: str) -> None:
        t = next(t for t in self.config.node_types if t.name == node_type)
        res = dict(t.resources)
        temp_dir = os.path.join(self.config.state_dir, host.name)
        os.makedirs(temp_dir, exist_ok=True)
        cmd = [*host.command_prefix, sys.executable, "-m", "raylite.cli", "start", "--block",
               f"--address={self.config.head_address}", f"--node-ip-address={host.ip}",
               f"--labels={NODE_LABEL}={host.name}"]
        if "CPU" in res:
            cmd.append(f"--num-cpus={res.pop('CPU'):g}")
        if "GPU" in res:
            cmd.append(f"--num-gpus={res.pop('GPU'):g}")
        if "memory" in res:
            cmd.append(f"--memory={int(res.pop('memory'))}")
        if "object_store_memory" in res:
            cmd.append(f"--object-store-memory={int(res.pop('object_store_memory'))}")
        if res:
            cmd.append("--resources=" + json.dumps(res))
        cmd += self.config.start_args.get(node_type, [])
        env = {**os.environ, "RAYLITE_TEMP_DIR": temp_dir, "PYTHONPATH": _package_root()
               + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
        if self.config.token:  # else the node reads the token as `raylite start` does (RAYLITE_TOKEN, ...)
            env["RAYLITE_TOKEN"] = self.config.token
        log_path = os.path.join(temp_dir, "autoscaler-node.log")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        self.nodes[host.name] = _Running(host, node_type, proc, log_path, temp_dir)

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        for name in node_ids:
            r = self.nodes.pop(name, None)
            if r is not None:
                self._stop(r)

    def _stop(self, r: _Running) -> None:
        env = {**os.environ, "RAYLITE_TEMP_DIR": r.temp_dir, "PYTHONPATH": _package_root()}
        subprocess.run([*r.host.command_prefix, sys.executable, "-m", "raylite.cli", "stop"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=STOP_TIMEOUT_S, check=False)
        try:
            r.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _killpg(r.process)

    def shutdown(self) -> None:
        """Stop every node this provider started."""
        self.terminate_nodes(list(self.nodes))


def _killpg(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=STOP_TIMEOUT_S)


def _package_root() -> str:
    import raylite

    return os.path.dirname(os.path.dirname(os.path.abspath(raylite.__file__)))


def _tail(path: str, limit: int = 600) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-limit:].decode(errors="replace").strip()
    except OSError:
        return ""
