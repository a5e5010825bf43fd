"""`raylite.cluster_utils.Cluster` (Ray's `ray.cluster_utils.Cluster`): a multi-node cluster on
one machine, made of real node daemons on loopback, the way libraries' test suites simulate
several machines::

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=2, resources={"accel": 1})
    cluster.wait_for_nodes()
    raylite.init(address=cluster.address)       # or cluster.connect()
    ...
    cluster.remove_node(worker)                   # the node dies; its tasks are retried elsewhere
    cluster.shutdown()                            # every process it started is gone

Each node is the daemon `raylite start` runs (the first one also runs the head), started in
its own session, so the processes that belong to a node (daemon, worker template, workers)
are exactly the members of that session. A node stops with the process that made the
cluster, even one that is killed (`shutdown_at_exit` also stops them at a normal exit).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from raylite._core.cluster import cluster as C
from raylite._core.cluster import files as CF
from raylite._core.cluster.driver import query_cluster
from raylite._core.config import get_config, system_config_env

# what add_node() starts unless told otherwise (Ray's cluster_utils defaults)
DEFAULT_NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0, "object_store_memory": 150 * 1024 * 1024}
_NODE_ARGS = {"num_cpus", "num_gpus", "resources", "object_store_memory", "labels", "memory",
              "node_ip_address", "port", "include_dashboard", "dashboard_host", "dashboard_port",
              "_system_config", "env_vars"}
# Ray node options that tune Ray's own processes (ports of its services, Redis, plasma, log
# monitor ...): accepted so that Ray test suites run unchanged; a raylite node has no such parts
_RAY_ONLY_NODE_ARGS = {"min_worker_port", "max_worker_port", "redis_port", "redis_password", "redis_username",
                       "node_manager_port", "object_manager_port", "dashboard_agent_listen_port",
                       "metrics_export_port", "metrics_agent_port", "ray_client_server_port", "runtime_env_agent_port",
                       "include_log_monitor", "cleanup", "plasma_directory", "huge_pages", "enable_object_reconstruction",
                       "gcs_server_port", "num_redis_shards", "redis_max_memory", "raylet_socket_name",
                       "plasma_store_socket_name", "worker_port_list", "node_name", "session_name",
                       "_temp_dir", "temp_dir", "storage", "fake_cluster", "autoscaling_config"}
STOP_GRACE_S = 10.0
# Ray's flag for "this platform cannot run a multi-node Cluster" (Windows); tests skip on it
cluster_not_supported = os.name == "nt"


@dataclass(eq=False)
class ClusterNode:
    """One node of a `Cluster` (in Ray, a `ray._private.node.Node`): hashable by identity."""

    node_id: str  # hex, as raylite.nodes() and get_runtime_context().get_node_id() give it
    node_ip_address: str
    address: str  # HOST:PORT of the cluster's head
    session_dir: str
    pid: int
    head: bool
    resources: dict[str, Any] = field(default_factory=dict)
    _started: C.StartedNode | None = field(default=None, repr=False)

    @property
    def unique_id(self) -> str:
        return self.node_id

    @property
    def gcs_address(self) -> str:
        return self.address

    def processes(self) -> list[int]:
        """Pids of the node's live processes (its session: daemon, worker template, workers)."""
        return _session_members(self.pid)

    def any_processes_alive(self) -> bool:
        return bool(self.processes())

    def remaining_processes_alive(self) -> bool:
        return self._started is not None and self._started.process.poll() is None

    def kill_all_processes(self, check_alive: bool = False, allow_graceful: bool = True,
                           wait: bool = True) -> None:
        """Stop the node: SIGTERM to the daemon first (it stops its workers) when `allow_graceful`,
        then SIGKILL to whatever of it is left."""
        _stop_session(self, allow_graceful)


class Cluster:
    """A cluster of real raylite nodes on this machine; see the module docstring.

    `initialize_head` starts the head node now (with `head_node_args`), and `connect` makes this
    process its driver. `shutdown_at_exit` stops every node when the program exits."""

    def __init__(self, initialize_head: bool = False, connect: bool = False,
                 head_node_args: dict | None = None, shutdown_at_exit: bool = True) -> None:
        if connect and not initialize_head:
            raise RuntimeError("Cluster(connect=True) needs initialize_head=True: there is no head to "
                               "connect to yet. Call add_node() for the head, then connect().")
        self.head_node: ClusterNode | None = None
        self.worker_nodes: set[ClusterNode] = set()
        self.connected = False
        self.webui_url = ""
        self._token = ""
        self._system_env: dict[str, str] = {}
        self._shutdown_at_exit = shutdown_at_exit
        if shutdown_at_exit:
            atexit.register(self.shutdown)
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()

    # ---------------------------------------------------------------- addresses
    @property
    def address(self) -> str | None:
        """HOST:PORT of the head, for `raylite.init(address=...)` (None before the head exists)."""
        return self.head_node.address if self.head_node is not None else None

    @property
    def gcs_address(self) -> str | None:
        return self.address

    def list_all_nodes(self) -> list[ClusterNode]:
        """The head (if any) first, then the worker nodes."""
        return ([self.head_node] if self.head_node is not None else []) + list(self.worker_nodes)

    def connect(self, namespace: str | None = None) -> Any:
        """Make this process the cluster's driver (`raylite.init(address=cluster.address)`)."""
        import raylite

        if self.address is None:
            raise RuntimeError("Cluster.connect(): the cluster has no head node yet; add_node() starts it.")
        if self.connected:
            raise RuntimeError("Cluster.connect(): this process is already connected to the cluster.")
        ctx = raylite.init(address=self.address, namespace=namespace, ignore_reinit_error=True)
        self.connected = True
        return ctx

    # ---------------------------------------------------------------- nodes
    def add_node(self, wait: bool = True, **node_args: Any) -> ClusterNode:
        """Start a node (the head, if there is none yet) and return it. Node options: num_cpus
        (default 1), num_gpus (0), resources, object_store_memory (150 MiB), labels, memory,
        node_ip_address (127.0.0.1); for the head also port, include_dashboard, dashboard_port,
        _system_config (given to every node). `wait`: return once the head lists it alive."""
        args = self._node_args(node_args)
        config = get_config()
        head = self.head_node is None
        ip = args.get("node_ip_address") or "127.0.0.1"
        extra = {"memory": args["memory"]} if args.get("memory") is not None else None
        common = dict(num_cpus=args["num_cpus"], num_gpus=args["num_gpus"], resources=args.get("resources"),
                      object_store_memory=args["object_store_memory"], labels=args.get("labels"),
                      extra_resources=extra, node_ip=ip, creator_pid=os.getpid(),
                      env={**self._system_env, **(args.get("env_vars") or {})})
        if head:
            started = self._start_head(config, args, common)
            self._token = _read(os.path.join(started.session_dir, "token"))
            self.webui_url = started.dashboard_url
        else:
            started = C.start_node(config, head=False, address=self.address, token=self._token, **common)
        node = ClusterNode(started.node_id, ip, started.address, started.session_dir, started.pid, head,
                           {k: args.get(k) for k in ("num_cpus", "num_gpus", "resources", "object_store_memory")},
                           started)
        if head:
            self.head_node = node
        else:
            self.worker_nodes.add(node)
        if wait:
            self._wait_alive({node.node_id}, timeout_s=30)
        return node

    def _node_args(self, node_args: dict) -> dict:
        unknown = set(node_args) - _NODE_ARGS - _RAY_ONLY_NODE_ARGS
        if unknown:
            raise TypeError(f"Cluster.add_node() got unknown node options {sorted(unknown)}; it takes "
                            f"{sorted(_NODE_ARGS)}.")
        args = {**DEFAULT_NODE_ARGS, **{k: v for k, v in node_args.items() if k in _NODE_ARGS}}
        for key in ("num_cpus", "num_gpus", "object_store_memory"):
            if args[key] is None:
                args[key] = DEFAULT_NODE_ARGS[key]
        if "_system_config" in node_args:
            if self.head_node is not None:
                raise ValueError("_system_config is the cluster's: pass it in head_node_args (the first "
                                 "add_node()); every node then gets it.")
            self._system_env, unknown_keys = system_config_env(node_args["_system_config"])
            if unknown_keys:
                warnings.warn(f"Cluster ignores _system_config keys {unknown_keys} (accepted for Ray "
                              "compatibility).", stacklevel=3)
        return args

    def _start_head(self, config: Any, args: dict, common: dict) -> C.StartedNode:
        dashboard = bool(args.get("include_dashboard"))
        port = args.get("dashboard_port")
        kwargs = dict(common, include_dashboard=dashboard, dashboard_host=args.get("dashboard_host") or "127.0.0.1",
                      dashboard_port=config.dashboard_port if port is None else int(port))
        if args.get("port"):
            return C.start_node(config, head=True, port=int(args["port"]), **kwargs)
        for attempt in range(5):  # a free port may be taken between choosing and binding it
            try:
                return C.start_node(config, head=True, port=_free_port(common["node_ip"]), **kwargs)
            except C.StartError as e:
                if "in use" not in str(e) or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def remove_node(self, node: ClusterNode, allow_graceful: bool = True) -> None:
        """Stop a node and every process it started. The head lists it dead; tasks that ran there
        are retried on other nodes (as for a machine that failed). With `allow_graceful` the node
        first gets SIGTERM and up to 10 s to stop its workers; otherwise it is killed at once."""
        if node is not self.head_node and node not in self.worker_nodes:
            raise ValueError(f"remove_node(): node {node.node_id[:12]} is not a node of this cluster "
                             "(already removed?).")
        if _driver_node_id() == node.node_id:
            raise ValueError(f"remove_node(): this process's driver is attached to node {node.node_id[:12]}; "
                             "removing it would break the driver. Remove another node, or call "
                             "raylite.shutdown() first.")
        _stop_session(node, allow_graceful)
        if node is self.head_node:
            self.head_node = None
        else:
            self.worker_nodes.discard(node)
        if node.any_processes_alive():
            raise RuntimeError(f"processes of node {node.node_id[:12]} are still alive after it was stopped: "
                               f"{node.processes()}")

    def wait_for_nodes(self, timeout: float = 30) -> None:
        """Wait until the head lists exactly as many alive nodes as were added and not removed;
        TimeoutError otherwise (also when a node died without remove_node())."""
        if self.address is None:
            raise RuntimeError("wait_for_nodes(): the cluster has no head node; add_node() starts it.")
        expected = len(self.list_all_nodes())
        deadline = time.monotonic() + timeout
        alive: set[str] = set()
        while time.monotonic() < deadline:
            alive = self._alive_ids()
            if len(alive) == expected:
                return
            time.sleep(0.05)
        raise TimeoutError(f"wait_for_nodes(): {len(alive)} nodes alive after {timeout}s, expected {expected}.")

    def _wait_alive(self, node_ids: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not node_ids <= self._alive_ids():
            if time.monotonic() > deadline:
                raise TimeoutError(f"node(s) {sorted(i[:12] for i in node_ids)} did not join the head within "
                                   f"{timeout_s}s.")
            time.sleep(0.05)

    def _alive_ids(self) -> set[str]:
        return {n["node_id"].hex() for n in query_cluster(self.address, self._token) if n["alive"]}

    def remaining_processes_alive(self) -> bool:
        return all(n.remaining_processes_alive() for n in self.list_all_nodes())

    def shutdown(self) -> None:
        """Disconnect this process's driver if it is connected here, then stop every node, worker
        nodes first. Safe to call more than once."""
        if self.head_node is not None and _driver_head() == self.head_node.address:
            import raylite

            raylite.shutdown()
        self.connected = False
        for node in list(self.worker_nodes):
            self.remove_node(node)
        if self.head_node is not None:
            head, self.head_node = self.head_node, None
            _stop_session(head, allow_graceful=True)
            if head._started is not None:
                C.forget_node(get_config(), head._started)
        if self._shutdown_at_exit:
            atexit.unregister(self.shutdown)


# ---------------------------------------------------------------- processes of a node
def _session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`. A node daemon starts its own session,
    and nothing under it starts another, so these are exactly the node's processes."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # state, ppid, pgrp, session
            out.append(int(name))
    return out


def _stop_session(node: ClusterNode, allow_graceful: bool) -> None:
    """Stop the node's daemon and every process of its session; reap the daemon. The daemon is
    our child and stays unreaped (a zombie) until the end, so its pid, which names the
    session, cannot be reused by another process meanwhile."""
    proc = node._started.process if node._started is not None else None
    if allow_graceful and proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while _session_members(node.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    deadline = time.monotonic() + STOP_GRACE_S
    while True:
        members = _session_members(node.pid)
        if not members or time.monotonic() > deadline:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.wait(STOP_GRACE_S)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(node.session_dir, CF.NODE_FILE))
    _remove_store(node)


def _remove_store(node: ClusterNode) -> None:
    """A killed node leaves its shared-memory store (named after its session) behind."""
    import glob
    import shutil

    shm = get_config().shm_dir
    for path in glob.glob(os.path.join(shm, f"raylite_{os.path.basename(node.session_dir)}_*")):
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- small helpers
def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _driver_info() -> Any:
    from raylite._core import runtime

    return runtime.driver() if runtime.client() is not None and not runtime.is_worker() else None


def _driver_node_id() -> str:
    info = _driver_info()
    return info.node_id if info is not None else ""


def _driver_head() -> str:
    info = _driver_info()
    head = info.head_address if info is not None else ""
    return head[len("tcp://"):] if head.startswith("tcp://") else head


class AutoscalingCluster:
    """Ray's `AutoscalingCluster`: a head on this machine and an autoscaler that adds and removes
    worker nodes of `worker_node_types` as demand comes and goes; the nodes are real node
    daemons on loopback addresses (127.0.<type>.<n>, one per node), started and stopped by the
    local node provider (raylite.autoscaler) from a thread of this process::

        cluster = AutoscalingCluster(head_resources={"CPU": 0},
                                     worker_node_types={"cpu_node": {"resources": {"CPU": 2},
                                                                     "min_workers": 0, "max_workers": 2}},
                                     idle_timeout_minutes=0.1)
        cluster.start()
        raylite.init("auto")
        ...
        raylite.shutdown()
        cluster.shutdown()

    The autoscaler package (L7) is loaded with importlib when start() runs, the way the
    package's facades load their libraries, so this module does not import upwards."""

    def __init__(self, head_resources: dict, worker_node_types: dict, autoscaler_v2: bool = False,
                 **config_kwargs: Any) -> None:
        if not isinstance(head_resources, dict) or not isinstance(worker_node_types, dict) or not worker_node_types:
            raise TypeError("AutoscalingCluster(head_resources={...}, worker_node_types={name: {resources: {...}, "
                            "min_workers: N, max_workers: N}})")
        self._head_resources = dict(head_resources)
        self._types = {str(k): dict(v) for k, v in worker_node_types.items()}
        idle_min = config_kwargs.pop("idle_timeout_minutes", None)
        self._idle_timeout_s = float(config_kwargs.pop("idle_timeout_s", 60.0 if idle_min is None else idle_min * 60))
        self._upscaling_speed = float(config_kwargs.pop("upscaling_speed", 1.0))
        self._interval_s = float(config_kwargs.pop("update_interval_s", 0.5))
        self._cluster: Cluster | None = None
        self._provider: Any = None
        self._autoscaler: Any = None
        self._stop: Any = None
        self._thread: Any = None
        self._state_dir = ""

    def start(self, _system_config: dict | None = None, override_env: dict | None = None) -> None:
        """Start the head and the autoscaler (which starts min_workers nodes of each type)."""
        import importlib
        import tempfile
        import threading

        res = dict(self._head_resources)
        head_args: dict[str, Any] = {"num_cpus": res.pop("CPU", 0), "num_gpus": res.pop("GPU", 0),
                                     "resources": res}
        if "object_store_memory" in res:
            head_args["object_store_memory"] = int(res.pop("object_store_memory"))
        if _system_config:
            head_args["_system_config"] = _system_config
        if override_env:
            head_args["env_vars"] = dict(override_env)
        self._cluster = Cluster(initialize_head=True, head_node_args=head_args)
        self._state_dir = tempfile.mkdtemp(prefix="rlasc", dir="/tmp")
        node_types = {}
        for i, (name, t) in enumerate(sorted(self._types.items()), start=1):
            res = dict(t.get("resources") or {})
            args = []
            if "object_store_memory" in res:
                args.append(f"--object-store-memory={int(res.pop('object_store_memory'))}")
            max_workers = int(t.get("max_workers", 0))
            node_types[name] = {"resources": res, "min_workers": int(t.get("min_workers", 0)),
                                "max_workers": max_workers, "start_args": args,
                                "worker_ips": [{"name": f"{name}-{j}", "ip": f"127.0.{i}.{j + 1}"}
                                               for j in range(max_workers)]}
        local = importlib.import_module("raylite.autoscaler.providers.local")
        loop = importlib.import_module("raylite.autoscaler.autoscaler")
        self._provider = local.LocalProvider({
            "head_address": self._cluster.address, "token": self._cluster._token,
            "idle_timeout_s": self._idle_timeout_s, "upscaling_speed": self._upscaling_speed,
            "state_dir": self._state_dir, "available_node_types": node_types})
        self._autoscaler = loop.Autoscaler(self._provider, address=self._cluster.address)
        # one round now: its published node types keep requests that only a worker node fits
        # pending from the first one on (and min_workers nodes are being launched)
        self._autoscaler.update()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._autoscaler.run, args=(self._interval_s, self._stop),
                                        name="raylite-autoscaler", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str | None:
        return self._cluster.address if self._cluster is not None else None

    def shutdown(self) -> None:
        """Stop the autoscaler, the nodes it started and the head. Safe to call more than once."""
        import shutil

        if self._stop is not None:
            self._stop.set()
            self._thread.join(60)
            self._autoscaler.close()
            self._provider.shutdown()
            self._stop = None
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
        if self._state_dir:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = ""


__all__ = ["AutoscalingCluster", "Cluster", "ClusterNode", "cluster_not_supported"]
