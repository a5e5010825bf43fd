"""COMPATIBILITY MODULE: the names libraries built on Ray read from Ray's half-private modules.

Ray keeps these in `ray._private.*` (or marks them internal), but widely used libraries read them
and they have been stable for years, so a library running on raylite through the `ray` name
(compat/ray, docs/ecosystem.md) needs them. They live here, in one place, rather than spread
through the core; Ray's dotted paths (`ray._private.worker`, `.services`, `.state`,
`.ray_constants`, `ray.util.accelerators`) are thin modules that re-export from this one.

Each name says who reads it; tests/compat/test_compat_names.py has a test per name naming the
library. Add a name here only with the library that needs it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

# --- ray._private.worker -------------------------------------------------------------------
# Ray's worker modes. verl, Ray Data's progress bars, Ray's own library code compare
# `ray.get_runtime_context().worker.mode` (or `global_worker.mode`) with these.
SCRIPT_MODE = 0  # a driver
WORKER_MODE = 1  # a task or actor process
SPILL_WORKER_MODE = 2
RESTORE_WORKER_MODE = 3


@dataclass(frozen=True)
class NodeView:
    """What libraries read from `global_worker.node` (Ray's `ray._private.node.Node`)."""

    node_ip_address: str
    node_id: str  # hex, as `get_runtime_context().get_node_id()`
    address: str  # the head's address (Ray: the GCS address)
    session_dir: str

    @property
    def unique_id(self) -> str:
        """Ray's name for the node's id (hex)."""
        return self.node_id

    @property
    def session_name(self) -> str:
        return os.path.basename(self.session_dir.rstrip("/"))

    def get_session_dir_path(self) -> str:
        return self.session_dir


class GlobalWorker:
    """`ray._private.worker.global_worker`: a live view of this process's connection.

    Ray keeps one mutable worker object per process; raylite has none (STYLE.md avoids it), so
    every property is read from the process's current client when asked: it is always in step
    with `raylite.init()`/`shutdown()` and with being a worker. Readers: Modin and verl (`mode`,
    to tell a driver from a worker), Ray Data's progress bars (`mode`), Ray's own integrations
    (`connected`, `node`, `worker_id`, `current_job_id`)."""

    @staticmethod
    def _client() -> Any:
        from raylite._core import runtime

        return runtime.client()

    @property
    def connected(self) -> bool:
        return self._client() is not None

    @property
    def mode(self) -> int | None:
        """WORKER_MODE in a task or actor, SCRIPT_MODE in a connected driver, None before init."""
        from raylite._core import runtime

        if runtime.is_worker():
            return WORKER_MODE
        return SCRIPT_MODE if self._client() is not None else None

    def check_connected(self) -> None:
        if self._client() is None:
            from raylite.exceptions import RaySystemError

            raise RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")

    @property
    def node(self) -> NodeView | None:
        client = self._client()
        if client is None:
            return None
        # (getattr: a driver connected through `ray://` holds a stand-in client without them)
        return NodeView(node_ip_address=get_node_ip_address(),
                        node_id=bytes(getattr(client, "node_id", b"")).hex(),
                        address=getattr(client, "head_address", ""),
                        session_dir=getattr(client, "session_dir", ""))

    @property
    def node_ip_address(self) -> str:
        self.check_connected()
        return get_node_ip_address()

    @property
    def worker_id(self) -> bytes:
        self.check_connected()
        return bytes(self._client().worker_id)

    @property
    def current_job_id(self) -> Any:
        from raylite._core.ids import JobID

        self.check_connected()
        return JobID(self._client().job_id)

    @property
    def current_node_id(self) -> Any:
        from raylite._core.ids import NodeID

        self.check_connected()
        return NodeID(self._client().node_id)

    @property
    def namespace(self) -> str:
        from raylite._core import runtime

        w = runtime.worker()
        if w is not None and w.ctx.namespace:
            return w.ctx.namespace
        self.check_connected()
        return self._client().namespace

    @property
    def core_worker(self) -> CoreWorkerView:
        self.check_connected()
        return CoreWorkerView(self._client())

    def __repr__(self) -> str:
        return f"<raylite GlobalWorker mode={self.mode} connected={self.connected}>"


class CoreWorkerView:
    """`global_worker.core_worker`: the read-only introspection of Ray's core worker that code
    checking for leaked references calls (Ray's own test modules end with a check that no
    ObjectRef is still counted: `get_all_reference_counts()`). Only that reading; Ray's other
    core-worker methods are its internals and are not offered."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get_all_reference_counts(self) -> dict[str, dict[str, int]]:
        """{object id hex: {"local": refs held in this process, "submitted": tasks using it}}.
        Actor handles are not ObjectRefs, as in Ray: the object raylite counts them with is left out."""
        from raylite._core.ids import ObjectID

        return {bytes(row[0]).hex(): {"local": row[5], "submitted": row[6]}
                for row in self._client.owned_objects()
                if ObjectID(bytes(row[0])).return_index() != ObjectID.HANDLE_TOKEN_INDEX}


global_worker = GlobalWorker()


# --- ray._private.services, ray.util --------------------------------------------------------
def get_node_ip_address(address: str | None = None) -> str:
    """The IP address of this process's node. Modin (`ray._private.services`), xgboost_ray and
    lightgbm_ray (`ray._private.services`, older: `ray.services`), vLLM (`ray.util`)."""
    from raylite.api import node_ip_address

    return node_ip_address()


# --- ray._private.state ----------------------------------------------------------------------
def _per_node(which: str) -> dict[str, dict[str, float]]:
    from raylite._core import resources as R
    from raylite.api import ensure_initialized, node_available

    client = ensure_initialized()
    out: dict[str, dict[str, float]] = {}
    for node in client.cluster_info().nodes:
        if not node["alive"]:
            continue
        res = node_available(client, node) if which == "available" else node[which]
        public = {k: v for k, v in res.items() if "_group_" not in k}
        values = {k: float(v) for k, v in R.from_fixed(public).items()}
        if which == "available":
            values = {k: v for k, v in values.items() if v > 0}
        out[node["node_id"].hex()] = values
    return out


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """{node id hex: resources available now} for each live node (resources at 0 left out, as in
    Ray). vLLM reads it to place its Ray executor's workers and data-parallel ranks."""
    return _per_node("available")


def total_resources_per_node() -> dict[str, dict[str, float]]:
    """{node id hex: total resources} for each live node. vLLM (data-parallel scaling)."""
    return _per_node("total")


class GlobalState:
    """`ray._private.state.state`: vLLM falls back to `state._available_resources_per_node()`
    on Ray releases whose module lacks the function (2.9)."""

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        return available_resources_per_node()

    _available_resources_per_node = available_resources_per_node

    def total_resources_per_node(self) -> dict[str, dict[str, float]]:
        return total_resources_per_node()

    def cluster_resources(self) -> dict[str, float]:
        from raylite.api import cluster_resources

        return cluster_resources()

    def available_resources(self) -> dict[str, float]:
        from raylite.api import available_resources

        return available_resources()


state = GlobalState()


# --- ray.logger ------------------------------------------------------------------------------
# xgboost_ray (`from ray import logger`) and older libraries log through Ray's package logger.
logger = logging.getLogger("raylite")


# --- ray.types --------------------------------------------------------------------------------
# vLLM's Ray executor annotates with `ray.types.ObjectRef` (see raylite/types.py: a typing-only
# generic, as Ray's is).


# --- ray._private.ray_constants ------------------------------------------------------------------
# Modin reads REDIS_DEFAULT_PASSWORD (cluster mode) and, through getattr with a default,
# MAC_DEGRADED_PERF_MMAP_SIZE_LIMIT; Ray's own library code and several libraries read their
# settings with env_integer/env_bool/env_float.
REDIS_DEFAULT_PASSWORD = ""
DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_DASHBOARD_AGENT_LISTEN_PORT = 52365
DEFAULT_CLIENT_PORT = 10001
RAY_ADDRESS_ENVIRONMENT_VARIABLE = "RAY_ADDRESS"
RAY_NAMESPACE_ENVIRONMENT_VARIABLE = "RAY_NAMESPACE"
RAY_RUNTIME_ENV_ENVIRONMENT_VARIABLE = "RAY_RUNTIME_ENV"
DEFAULT_OBJECT_STORE_MEMORY_PROPORTION = 0.3
ID_SIZE = 28
# the internal-KV namespace of exported functions and classes in Ray (raylite keeps code elsewhere;
# the name is here so modules importing it load)
KV_NAMESPACE_FUNCTION_TABLE = b"fun"
LOGGER_LEVEL = "info"
LOGGER_FORMAT = "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
ENABLE_RAY_CLUSTER = True
RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # raylite's runtime_env has no `uv run` hook


def env_integer(key: str, default: int) -> int:
    """An integer from the environment, or `default` when unset or not an integer."""
    try:
        return int(os.environ[key])
    except (KeyError, ValueError):
        return default


def env_float(key: str, default: float) -> float:
    """A float from the environment, or `default` when unset or not a number."""
    try:
        return float(os.environ[key])
    except (KeyError, ValueError):
        return default


def env_bool(key: str, default: bool) -> bool:
    """True for "true"/"1" (any case), False for anything else set; `default` when unset."""
    if key not in os.environ:
        return default
    return os.environ[key].lower() in ("true", "1")


# --- ray.util.accelerators ----------------------------------------------------------------------
# The `accelerator_type=` names of Ray's accelerators, for programs that pass them
# (`@ray.remote(accelerator_type=NVIDIA_TESLA_V100)`). Values are the type strings Ray
# advertises as `accelerator_type:<TYPE>` resources.
ACCELERATOR_TYPES = {
    "NVIDIA_TESLA_V100": "V100", "NVIDIA_TESLA_P100": "P100", "NVIDIA_TESLA_T4": "T4",
    "NVIDIA_TESLA_P4": "P4", "NVIDIA_TESLA_K80": "K80", "NVIDIA_TESLA_A10G": "A10G",
    "NVIDIA_L4": "L4", "NVIDIA_A100": "A100", "NVIDIA_TESLA_A100": "A100", "NVIDIA_H100": "H100",
    "INTEL_MAX_1550": "Intel-GPU-Max-1550", "INTEL_MAX_1100": "Intel-GPU-Max-1100",
    "INTEL_GAUDI": "Intel-GAUDI", "AMD_INSTINCT_MI100": "AMD-Instinct-MI100",
    "AMD_INSTINCT_MI210": "AMD-Instinct-MI210", "AMD_INSTINCT_MI250": "AMD-Instinct-MI250X-MI250",
    "AMD_INSTINCT_MI250x": "AMD-Instinct-MI250X", "AMD_INSTINCT_MI300x": "AMD-Instinct-MI300X-OAM",
    "AMD_RADEON_R9_200_HD_7900": "AMD-Radeon-R9-200-HD-7900", "AMD_RADEON_HD_7900": "AMD-Radeon-HD-7900",
    "AWS_NEURON_CORE": "aws-neuron-core", "GOOGLE_TPU_V2": "TPU-V2", "GOOGLE_TPU_V3": "TPU-V3",
    "GOOGLE_TPU_V4": "TPU-V4", "GOOGLE_TPU_V5P": "TPU-V5P", "GOOGLE_TPU_V5LITEPOD": "TPU-V5LITEPOD",
    "GOOGLE_TPU_V6E": "TPU-V6E", "GOOGLE_TPU_V7X": "TPU-V7X", "METAX_C500": "MXC500",
    "METAX_C550": "MXC550", "MOBILINT_ARIES": "MOBILINT_ARIES", "MOBILINT_REGULUS": "MOBILINT_REGULUS",
    "APPLE_M1": "M1", "APPLE_M1_PRO": "M1-Pro", "APPLE_M1_MAX": "M1-Max", "APPLE_M1_ULTRA": "M1-Ultra",
    "APPLE_M2": "M2", "APPLE_M2_PRO": "M2-Pro", "APPLE_M2_MAX": "M2-Max", "APPLE_M2_ULTRA": "M2-Ultra",
    "APPLE_M3": "M3", "APPLE_M3_PRO": "M3-Pro", "APPLE_M3_MAX": "M3-Max", "APPLE_SILICON": "Apple-Silicon",
}


# --- ray.util.client.common ----------------------------------------------------------------------
# Modin: `isinstance(x, (ray.ObjectRef, ClientObjectRef))` decides what is a future, and it imports
# the name unconditionally. raylite's refs are one type whether the driver is local or connected
# through `ray://`, so `ClientObjectRef` is a subclass raylite never instantiates: nothing is a
# ClientObjectRef that is not already an ObjectRef. Made on first use (PEP 562), so importing this
# module does not load the core's object refs.
def __getattr__(name: str) -> Any:
    if name == "ClientObjectRef":
        from raylite._core.client.refs import ObjectRef

        cls = type("ClientObjectRef", (ObjectRef,), {
            "__module__": __name__, "__qualname__": "ClientObjectRef",
            "__doc__": "A ref held through Ray Client; raylite makes none (see compat_names.py)."})
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
