"""Bodies of the Core API: init, shutdown, get, put, wait, cancel, nodes, ...

Actors build on this module: `get_actor` and `kill` live with ActorHandle in `actor.py`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

from raylite._core import config as config_mod
from raylite._core import resources as R
from raylite._core import runtime
from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite._core.config import env_address, env_storage_path  # noqa: F401  (libraries read these through here)
from raylite._core.task_spec import KIND_ACTOR_CALL
from raylite._runtime_env import merge_runtime_env
from raylite.experimental.compiled_dag_ref import CompiledDAGRef

_RAY_INIT_KWARGS = {
    "labels", "local_mode", "include_dashboard", "dashboard_host", "dashboard_port", "job_config",
    "configure_logging", "logging_format", "logging_config", "storage", "enable_resource_isolation",
    "system_reserved_cpu", "system_reserved_memory", "_system_config", "_temp_dir",
    "_node_ip_address", "_enable_object_reconstruction", "_metrics_export_port", "_plasma_directory",
    "_redis_password", "_memory", "_node_name", "_tracing_startup_hook", "_cgroup_path",
}
_init_lock = threading.RLock()
_job_runtime_env: dict = {}


class RayContext(dict):
    """What init() returns: address info; usable as a context manager that shuts down on exit."""

    def __init__(self, info: Any) -> None:
        from raylite._core.cluster.files import dashboard_link

        # Ray's form has no scheme ("127.0.0.1:8265"); raylite's carries the token, so
        # f"http://{ctx.dashboard_url}" opens the dashboard in a browser and works as a
        # JobSubmissionClient address (which takes the token from it).
        link = dashboard_link(getattr(info, "dashboard_url", "") or "", getattr(info, "token", "") or "")
        url = link.split("://", 1)[-1] or None
        super().__init__(address=info.head_address, node_id=info.node_id, session_dir=info.session_dir,
                         node_ip_address="127.0.0.1", dashboard_url=url)
        self.address_info = dict(self)
        self.dashboard_url = url

    def __enter__(self) -> RayContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        shutdown()

    def disconnect(self) -> None:
        shutdown()


def init(address: str | None = None, *, num_cpus: float | None = None, num_gpus: float | None = None,
         resources: dict[str, float] | None = None, namespace: str | None = None,
         runtime_env: dict | None = None, object_store_memory: int | None = None,
         ignore_reinit_error: bool = False, log_to_driver: bool = True,
         logging_level: int | str = logging.INFO, include_dashboard: bool | None = None,
         **kwargs: Any) -> RayContext:
    """Start a local cluster (or connect to one) and make this process its driver."""
    job_config = kwargs.get("job_config")
    if job_config is not None:  # Ray's JobConfig: its runtime_env and namespace, unless init() gives them
        runtime_env = {**(job_config.runtime_env or {}), **(runtime_env or {})} or None
        namespace = namespace or job_config.ray_namespace
    for key in kwargs:
        if key not in _RAY_INIT_KWARGS:
            raise TypeError(f"init() got an unexpected keyword argument {key!r}")
        if key in ("dashboard_host", "dashboard_port", "job_config"):
            continue  # used below (job_config: above)
        if key == "_system_config":  # the keys raylite honours go to a local cluster's node
            from raylite._core.config import system_config_env

            unknown = system_config_env(kwargs[key])[1]
            if unknown:
                warnings.warn(f"raylite.init() ignores _system_config keys {unknown} (accepted for Ray "
                              "compatibility; it honours memory_usage_threshold and "
                              "memory_monitor_refresh_ms).", stacklevel=2)
            continue
        if kwargs[key] not in (None, False):
            warnings.warn(f"raylite.init() ignores {key}={kwargs[key]!r} (accepted for Ray compatibility).",
                          stacklevel=2)
    with _init_lock:
        if runtime.is_worker():
            return RayContext(runtime.driver() or _WorkerInfo())
        if runtime.client() is not None:
            if ignore_reinit_error:
                return RayContext(runtime.driver())
            raise RuntimeError("Maybe you called raylite.init twice by accident? This error can be "
                               "suppressed by passing ignore_reinit_error=True, or call "
                               "raylite.shutdown() first.")
        if resources:
            for k in resources:
                if k in ("CPU", "GPU"):
                    raise ValueError(f"Use num_cpus/num_gpus instead of resources[{k!r}] in init().")
        if address == "auto" and config_mod.job_submission_id():
            address = None  # a submitted job's driver: its cluster is in RAYLITE_ADDRESS
        address = address or config_mod.env_address() or None
        if address and address not in ("local", "auto") and not address.startswith("ray://") \
                and kwargs.get("_system_config"):
            # as Ray: a named cluster's settings were fixed when it started
            raise ValueError("When connecting to an existing cluster, _system_config must not be provided. "
                             "Pass it to the ray.init() (or `raylite start`) that starts the cluster.")
        if runtime_env is None:
            runtime_env = config_mod.job_runtime_env()  # the job's, from the supervisor (None: none)
        if address is None:  # as in Ray: join the cluster `raylite start` left running here
            from raylite._core.cluster.files import running_cluster_address
            from raylite._core.config import get_config

            if running_cluster_address(get_config().temp_dir):
                address = "auto"
        from raylite._core.cluster import driver

        global _job_runtime_env
        _job_runtime_env = merge_runtime_env(None, runtime_env) if runtime_env else {}
        if address and address.startswith("ray://"):  # Ray Client: one port on the head
            info = driver.init_ray_client(address, namespace=namespace or _anon_namespace(),
                                          log_to_driver=log_to_driver, runtime_env=runtime_env or {})
        elif address and address not in ("local",):
            if kwargs.get("_system_config"):
                warnings.warn("raylite.init() ignores _system_config when it connects to a running cluster "
                              f"({address}): a cluster's settings are fixed when it starts (Ray refuses this "
                              "combination). Pass it to the init() that starts the cluster instead.",
                              stacklevel=2)
            info = driver.init_remote(address, namespace=namespace or _anon_namespace(),
                                      log_to_driver=log_to_driver)
        else:
            info = driver.init_local(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources,
                                     namespace=namespace or _anon_namespace(),
                                     object_store_memory=object_store_memory, log_to_driver=log_to_driver,
                                     labels=kwargs.get("labels"), include_dashboard=include_dashboard,
                                     dashboard_host=kwargs.get("dashboard_host"),
                                     dashboard_port=kwargs.get("dashboard_port"),
                                     system_config=kwargs.get("_system_config"))
        _announce_dashboard(info, logging_level)
        if runtime_env and (runtime_env.get("working_dir") or runtime_env.get("py_modules")
                            or callable(runtime_env.get("worker_process_setup_hook"))):
            # now there is a cluster to ship them to (folders, and a setup hook given as a function)
            try:
                _job_runtime_env = merge_runtime_env(None, runtime_env)
            except BaseException:
                driver.shutdown()
                raise
        if not (address and address.startswith("ray://")):  # a Ray Client program's folders are elsewhere
            _job_runtime_env = _with_driver_sys_path(_job_runtime_env, getattr(info, "node_sys_path", ()))
        if job_config is not None and job_config.code_search_path:
            # the job's workers import from these directories too, as Ray puts them on their sys.path
            from raylite._core.runtime_env.check import DRIVER_SYS_PATH

            paths = [os.path.abspath(p) for p in job_config.code_search_path]
            _job_runtime_env = {**_job_runtime_env,
                                DRIVER_SYS_PATH: [*_job_runtime_env.get(DRIVER_SYS_PATH, []), *paths]}
        if job_config is not None and job_config.default_actor_lifetime == "detached":
            from raylite._core.runtime_env.check import DEFAULT_ACTOR_LIFETIME

            _job_runtime_env = {**_job_runtime_env, DEFAULT_ACTOR_LIFETIME: "detached"}
        return RayContext(info)


def _with_driver_sys_path(env: dict, node_has: tuple) -> dict:
    """The job's workers import the modules beside the driver's script (and in its working
    directory), as in Ray: a node this driver started has them on its PYTHONPATH; the workers of
    a cluster it joined get them through the job's runtime_env (raylite's own field, which the
    runtime context does not show), so only the workers of this job see them."""
    from raylite._core.cluster.launch import driver_sys_path
    from raylite._core.runtime_env.check import DRIVER_SYS_PATH

    missing = [p for p in driver_sys_path(bool(env.get("working_dir"))) if p not in node_has]
    return {**env, DRIVER_SYS_PATH: missing} if missing else env


def _announce_dashboard(info: Any, logging_level: int | str) -> None:
    """One line on stderr with the dashboard's link, token included (as Jupyter prints its
    URL), so a browser gets in on the first click: once, by the process that started the
    cluster (`raylite start --head` prints it for the clusters it starts), and not when
    `logging_level` is above INFO."""
    from raylite._core.cluster.files import dashboard_link

    level = logging_level if isinstance(logging_level, int) else logging.getLevelName(
        str(logging_level).upper())
    if not info.local or not getattr(info, "dashboard_url", ""):
        return  # a running cluster's link was printed by whoever started it
    if isinstance(level, int) and level > logging.INFO:
        return
    import sys

    print("Started a local raylite cluster. View the dashboard at "
          f"{dashboard_link(info.dashboard_url, info.token)}",
          file=sys.stderr, flush=True)


class _WorkerInfo:
    head_address = ""
    node_id = ""
    session_dir = ""


def _anon_namespace() -> str:
    import uuid

    return f"anon-{uuid.uuid4().hex[:12]}"


def job_runtime_env() -> dict:
    """The job's runtime_env as its user gave it (raylite's own fields left out)."""
    from raylite._core.runtime_env.check import PRIVATE_KEYS

    env = inherited_runtime_env()
    return {k: v for k, v in env.items() if k not in PRIVATE_KEYS} if PRIVATE_KEYS.intersection(env) else env


def inherited_runtime_env() -> dict:
    """What a task or actor submitted from here starts from: the driver's job runtime_env, or in
    a worker the running task's."""
    if runtime.is_worker():
        w = runtime.worker()
        spec = w.ctx.current_spec
        if w.actor_spec is not None and (spec is None or spec.kind == KIND_ACTOR_CALL):
            spec = w.actor_spec  # in an actor, its calls run in the actor's runtime_env (as in Ray)
        return dict(spec.runtime_env) if spec is not None and spec.runtime_env else {}
    return _job_runtime_env


def current_task_id() -> bytes:
    if runtime.is_worker():
        return runtime.worker().running_task_id()
    return b""


def captured_placement_group() -> str:
    """Hex id of the placement group that captures this task's (or actor's) children, or ""."""
    w = runtime.worker() if runtime.is_worker() else None
    if w is None:
        return ""
    spec = w.actor_spec or w.ctx.current_spec
    return getattr(spec, "capture_pg", "") if spec is not None else ""


def is_initialized() -> bool:
    return runtime.client() is not None


def shutdown() -> None:
    """Stop this driver's local cluster (or disconnect from a remote one)."""
    if runtime.is_worker():
        return
    import sys

    metrics = sys.modules.get("raylite.util.metrics")  # loaded only if the program records metrics
    if metrics is not None:
        metrics._REGISTRY.flush()  # values recorded since the last 2 s flush reach the cluster
    from raylite._core.cluster import driver

    driver.shutdown()


def ensure_initialized() -> Any:
    client = runtime.client()
    if client is None:
        with _init_lock:
            client = runtime.client()
            if client is None:
                init()
                client = runtime.client()
    return client


def _check_refs(refs: Any, where: str) -> None:
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"{where} expects an ObjectRef or a list of ObjectRefs, but got "
                            f"{type(r).__name__}: {r!r:.80}. Pass the refs returned by .remote() or put().")


def get(object_refs: Any, *, timeout: float | None = None) -> Any:
    """Values of the objects; raises the task's error (as its original type) if it failed."""
    client = ensure_initialized()
    if isinstance(object_refs, (ObjectRefGenerator, DynamicObjectRefGenerator)):
        return object_refs  # Ray returns a generator as it is: its items' errors surface at their own get()
    if isinstance(object_refs, ObjectRef):
        return client.get([object_refs], timeout)[0]
    if isinstance(object_refs, CompiledDAGRef):
        return object_refs.get(timeout)
    if isinstance(object_refs, (list, tuple)):
        if object_refs and isinstance(object_refs[0], CompiledDAGRef):
            return _get_compiled(object_refs, timeout)
        _check_refs(object_refs, "raylite.get()")
        return client.get(list(object_refs), timeout)
    raise TypeError(f"raylite.get() expects an ObjectRef or a list of ObjectRefs, but got "
                    f"{type(object_refs).__name__}: {object_refs!r:.80}.")


def _get_compiled(refs: Sequence[Any], timeout: float | None) -> list[Any]:
    """ray.get on a list of a compiled graph's results (a MultiOutputNode's execute())."""
    if not all(isinstance(r, CompiledDAGRef) for r in refs):
        raise TypeError("raylite.get() got a list mixing CompiledDAGRefs with other values; get "
                        "compiled-graph results and ObjectRefs in separate calls.")
    deadline = None if timeout is None else time.monotonic() + timeout
    return [r.get(None if deadline is None else max(0.0, deadline - time.monotonic())) for r in refs]


def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    return ensure_initialized().put(value)


def wait(object_refs: Sequence[ObjectRef], *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Split refs into (ready, not ready) once num_returns are ready or the timeout passes."""
    client = ensure_initialized()
    if isinstance(object_refs, ObjectRef) or not isinstance(object_refs, (list, tuple)):
        raise TypeError("wait() expects a list of ObjectRefs, e.g. wait([ref]).")
    if any(isinstance(r, ObjectRefGenerator) for r in object_refs):
        _check_refs([r for r in object_refs if not isinstance(r, ObjectRefGenerator)], "raylite.wait()")
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be non-negative, got {timeout}")
        if not 0 < num_returns <= len(object_refs):
            raise ValueError(f"num_returns ({num_returns}) must be between 1 and the number of refs "
                             f"({len(object_refs)}).")
        return client.wait_with_generators(list(object_refs), num_returns, timeout)
    _check_refs(object_refs, "raylite.wait()")
    if len(set(object_refs)) != len(object_refs):
        raise ValueError("wait() got duplicate ObjectRefs in its list.")
    if num_returns <= 0 or num_returns > len(object_refs):
        if not object_refs:
            return [], []
        raise ValueError(f"num_returns ({num_returns}) must be between 1 and the number of refs "
                         f"({len(object_refs)}).")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be non-negative, got {timeout}")
    return client.wait(list(object_refs), num_returns, timeout, fetch_local)


def cancel(ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"raylite.cancel() expects an ObjectRef, got {type(ref).__name__}.")
    ensure_initialized().cancel(ref, force, recursive)


def list_named_actors(all_namespaces: bool = False) -> list:
    client = ensure_initialized()
    actors = client.list_named_actors(all_namespaces)
    if all_namespaces:
        return actors
    return [a["name"] for a in actors]


def nodes() -> list[dict]:
    client = ensure_initialized()
    info = client.cluster_info()
    out = []
    for n in info.nodes:
        out.append({
            "NodeID": n["node_id"].hex(), "Alive": n["alive"], "NodeManagerAddress": n["ip"],
            "NodeManagerHostname": n["ip"], "NodeName": n["ip"], "Resources": _public(n["total"]),
            "Labels": n.get("labels", {}), "alive": n["alive"], "DeathReason": n.get("death_cause", ""),
            "address": n["address"],
            # Ray's plasma socket: one per node, so code and tests tell nodes apart by it; here
            # the node's shared-memory store directory
            "ObjectStoreSocketName": n.get("store_dir", ""),
        })
    return out


def _public(res: dict) -> dict:
    return {k: v for k, v in R.from_fixed(res).items() if "_group_" not in k}


def cluster_resources() -> dict[str, float]:
    total: dict[str, int] = {}
    client = ensure_initialized()
    for n in client.cluster_info().nodes:
        if n["alive"]:
            R.add(total, {k: v for k, v in n["total"].items() if "_group_" not in k})
    return {k: float(v) for k, v in R.from_fixed(total).items()}


def available_resources() -> dict[str, float]:
    client = ensure_initialized()
    total: dict[str, int] = {}
    for n in client.cluster_info().nodes:
        if not n["alive"]:
            continue
        avail = node_available(client, n)
        R.add(total, {k: v for k, v in avail.items() if "_group_" not in k and v > 0})
    return {k: float(v) for k, v in R.from_fixed(total).items() if v > 0}


def node_available(client: Any, node: dict) -> dict[str, int]:
    """A node's available resources (fixed point), `object_store_memory` less what its store
    holds now, as Ray reports it (objects are not scheduled by it, so only this view changes).
    This node's own figures are read from it directly; another's from its last report (~2 s)."""
    if node["node_id"] == client.node_id:
        info = client.local_node_info()
        avail, used = dict(info.available), info.store_used_bytes
    else:
        avail, used = dict(node["available"]), int((node.get("stats") or {}).get("store_used_bytes", 0))
    if "object_store_memory" in avail and used:
        avail["object_store_memory"] = max(0, avail["object_store_memory"] - used * R.SCALE)
    return avail


def is_picklable(obj: Any) -> bool:
    """Whether raylite can send `obj` to a task (backs raylite.util.inspect_serializability)."""
    from raylite._core.serialization import _picklable

    return _picklable(obj)


def node_ip_address() -> str:
    """This process's node IP (backs raylite.util.get_node_ip_address)."""
    client = runtime.client()
    if client is not None and client.node_ip:
        return client.node_ip
    from raylite._core.config import get_config

    return get_config().node_ip_address or "127.0.0.1"


def get_gpu_ids() -> list[int]:
    """The GPU device ids given to the current task or actor ([] in the driver)."""
    if runtime.is_worker():
        return list(runtime.worker().ctx.gpu_ids)
    return []


__all__ = ["init", "shutdown", "is_initialized", "get", "put", "wait", "cancel", "nodes",
           "cluster_resources", "available_resources", "get_gpu_ids"]
