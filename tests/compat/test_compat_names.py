"""Ray's half-private names that libraries read (raylite/_private/compat_names.py): one test per
name, each naming the library whose source reads it. They run against raylite's modules (always
present); the last test checks that Ray's dotted paths, through compat/ray, are these objects."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import pickle

import pytest

import raylite
from raylite._private import compat_names, ray_constants, services, state, worker
from tests.conftest import wait_for

from .conftest import alias_installed, run_python


def test_global_worker_before_init_is_not_connected():
    """Modin, verl: `mode` is None and `connected` False before init (Ray's values);
    check_connected() raises RaySystemError, as Ray's does."""
    out = run_python("from raylite._private.worker import global_worker as w\n"
                     "import raylite.exceptions as e\n"
                     "print(w.mode, w.connected, w.node)\n"
                     "try:\n    w.check_connected()\nexcept e.RaySystemError as x:\n    print('raised', x)")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "None False None" and lines[1].startswith("raised Ray has not been started")


def test_worker_mode_tells_the_driver_from_a_worker_verl_modin(cluster):
    """verl's `is_driver()`: `ray.get_runtime_context().worker.mode != WORKER_MODE`
    (`from ray._private.worker import WORKER_MODE`); Ray Data's progress bars compare
    `global_worker.mode` with SCRIPT_MODE."""
    assert (worker.SCRIPT_MODE, worker.WORKER_MODE) == (0, 1)  # Ray's integers
    assert raylite.get_runtime_context().worker.mode == worker.SCRIPT_MODE
    assert worker.global_worker.mode == worker.SCRIPT_MODE and worker.global_worker.connected

    @raylite.remote
    def in_task():
        from raylite._private.worker import WORKER_MODE, global_worker

        return raylite.get_runtime_context().worker.mode == WORKER_MODE, global_worker.mode

    @raylite.remote
    class InActor:
        def mode(self):
            return raylite.get_runtime_context().worker.mode

    assert raylite.get(in_task.remote()) == (True, worker.WORKER_MODE)
    actor = InActor.remote()
    assert raylite.get(actor.mode.remote()) == worker.WORKER_MODE
    raylite.kill(actor)


def test_global_worker_node_and_ids_ray_integrations(cluster):
    """Ray's own library code and its test utilities read `global_worker.node`
    (`node_ip_address`, `session_name`), `worker_id` (bytes) and `current_job_id`."""
    w = worker.global_worker
    ctx = raylite.get_runtime_context()
    assert w.node.node_ip_address == raylite.util.get_node_ip_address()
    assert w.node.node_id == ctx.get_node_id()
    assert w.node.session_name.startswith("session_") and w.node.get_session_dir_path().endswith(w.node.session_name)
    assert isinstance(w.worker_id, bytes) and w.worker_id.hex() == ctx.get_worker_id()
    assert w.current_job_id.hex() == ctx.get_job_id()
    assert w.current_node_id.hex() == ctx.get_node_id()
    assert w.namespace == ctx.namespace
    assert worker.Worker is worker.GlobalWorker


def test_core_worker_reference_counts_ray_test_suites(cluster):
    """Ray's own test modules end by checking that no ObjectRef leaked:
    `global_worker.core_worker.get_all_reference_counts()`, per object its local and submitted
    counts. A held ref counts 1 local; an argument of a running task counts as submitted; once
    both are gone the object has no counts left."""
    import gc

    from tests.conftest import wait_for

    counts = worker.global_worker.core_worker.get_all_reference_counts
    ref = raylite.put(b"x" * 10)
    assert counts()[ref.hex()] == {"local": 1, "submitted": 0}

    @raylite.remote
    def hold(gate, x):
        raylite.get(gate.wait.remote())

    @raylite.remote(num_cpus=0)
    class Gate:
        def __init__(self):
            import threading

            self.event = threading.Event()

        def wait(self):
            self.event.wait(30)

        def open(self):
            self.event.set()

    gate = Gate.options(max_concurrency=2).remote()
    running = hold.remote(gate, ref)
    key = ref.hex()
    wait_for(lambda: counts()[key]["submitted"] >= 1, what="the argument counted as submitted")
    del ref
    gc.collect()
    assert counts()[key]["local"] == 0
    raylite.get(gate.open.remote())
    raylite.get(running)
    wait_for(lambda: counts().get(key, {"local": 0, "submitted": 0}) == {"local": 0, "submitted": 0},
             what="no counts left once the task ended")
    # the live actor handle is not an ObjectRef: Ray's leak checks must not see it
    assert not [k for k in counts() if k.endswith("fffffffe")]


def test_services_get_node_ip_address_modin_xgboost_ray(cluster):
    """Modin (deferred_execution.py: `from ray._private.services import get_node_ip_address`),
    xgboost_ray and lightgbm_ray (the rabit/tracker host)."""
    node_ips = {n["NodeManagerAddress"] for n in raylite.nodes() if n["Alive"]}
    assert services.get_node_ip_address() in node_ips

    @raylite.remote
    def from_a_task():
        from raylite._private.services import get_node_ip_address

        return get_node_ip_address()

    assert raylite.get(from_a_task.remote()) in node_ips


def test_util_get_node_ip_address_vllm(cluster):
    """vLLM: `ray.util.get_node_ip_address()` for its NIXL side channel and executor workers."""
    @raylite.remote
    def ip():
        return raylite.util.get_node_ip_address()

    assert raylite.get(ip.remote()) in {n["NodeManagerAddress"] for n in raylite.nodes()}


def test_resources_per_node_vllm(cluster):
    """vLLM (v1/executor/ray_utils.py, v1/engine/utils.py): `from ray._private.state import
    available_resources_per_node, total_resources_per_node`, keyed by node id, live nodes only;
    it falls back to `state._available_resources_per_node` (Ray 2.9)."""
    node_ids = {n["NodeID"] for n in raylite.nodes() if n["Alive"]}
    total = state.total_resources_per_node()
    assert set(total) == node_ids
    assert sum(r.get("CPU", 0) for r in total.values()) == raylite.cluster_resources()["CPU"]
    assert not any("_group_" in k for r in total.values() for k in r)

    @raylite.remote(num_cpus=1)
    class Holder:
        def ready(self):
            return True

    holder = Holder.remote()
    raylite.get(holder.ready.remote())
    try:
        def free_cpus_agree() -> bool:  # with the public count (both move as leases come and go)
            per_node = sum(r.get("CPU", 0) for r in state.available_resources_per_node().values())
            return per_node == raylite.available_resources().get("CPU", 0)

        wait_for(free_cpus_agree, what="per-node available CPUs to add up to available_resources()")
        available = state.available_resources_per_node()
        assert set(available) <= node_ids
        assert sum(r.get("CPU", 0) for r in available.values()) <= raylite.cluster_resources()["CPU"] - 1
        assert all(v > 0 for r in available.values() for v in r.values())  # zeros left out, as in Ray
        assert state.state._available_resources_per_node() == available
        assert state.state.total_resources_per_node() == total
    finally:
        raylite.kill(holder)


def test_types_object_ref_vllm():
    """vLLM's Ray executor: `from ray.types import ObjectRef`, used in annotations."""
    from raylite.types import ObjectRef

    @dataclasses.dataclass
    class WorkerState:  # the shape of vLLM's use: a dataclass field annotated with it
        run_ref: ObjectRef | None = None
        refs: list[ObjectRef[int]] = dataclasses.field(default_factory=list)

    assert WorkerState().run_ref is None
    assert raylite.ObjectRef[int].__origin__ is raylite.ObjectRef  # the runtime class takes it too


def test_object_id_is_object_ref_older_libraries():
    """Older libraries and Ray's docs of the time: `isinstance(x, ray.ObjectID)`. In Ray 2.60
    `ray.ObjectID` is `ray.ObjectRef` itself."""
    assert raylite.ObjectID is raylite.ObjectRef


def test_logger_xgboost_ray():
    """xgboost_ray: `from ray import logger`, then `logger.info(...)`."""
    from raylite import logger

    assert isinstance(logger, logging.Logger) and logger is logging.getLogger("raylite")


def test_ray_constants_modin():
    """Modin's initialize_ray: `ray.ray_constants.REDIS_DEFAULT_PASSWORD` (cluster mode) and
    `getattr(ray.ray_constants, "MAC_DEGRADED_PERF_MMAP_SIZE_LIMIT", None)`."""
    assert raylite.ray_constants is ray_constants
    assert raylite.ray_constants.REDIS_DEFAULT_PASSWORD == ""
    assert getattr(raylite.ray_constants, "MAC_DEGRADED_PERF_MMAP_SIZE_LIMIT", None) is None
    assert (ray_constants.DEFAULT_PORT, ray_constants.DEFAULT_DASHBOARD_PORT) == (6379, 8265)


def test_ray_constants_env_helpers_ray_library_code(monkeypatch):
    """Ray's library code (and libraries copying it) read settings with `ray_constants.env_integer`
    / `env_bool` / `env_float`: a bad value falls back to the default."""
    monkeypatch.setenv("RL_COMPAT_INT", "7")
    monkeypatch.setenv("RL_COMPAT_BAD", "seven")
    monkeypatch.setenv("RL_COMPAT_BOOL", "TRUE")
    monkeypatch.setenv("RL_COMPAT_FLOAT", "0.5")
    assert ray_constants.env_integer("RL_COMPAT_INT", 1) == 7
    assert ray_constants.env_integer("RL_COMPAT_BAD", 1) == 1
    assert ray_constants.env_integer("RL_COMPAT_UNSET", 3) == 3
    assert ray_constants.env_bool("RL_COMPAT_BOOL", False) is True
    assert ray_constants.env_bool("RL_COMPAT_INT", True) is False
    assert ray_constants.env_bool("RL_COMPAT_UNSET", True) is True
    assert ray_constants.env_float("RL_COMPAT_FLOAT", 1.0) == 0.5


def test_accelerator_constants_accelerator_type_programs():
    """Programs that pass `accelerator_type=NVIDIA_TESLA_V100` (Ray's docs, Ray Train/Serve
    examples): `from ray.util.accelerators import ...`; values are Ray's type strings."""
    from raylite.util import accelerators

    assert accelerators.NVIDIA_TESLA_V100 == "V100" and accelerators.NVIDIA_A100 == "A100"
    assert accelerators.NVIDIA_H100 == "H100" and accelerators.GOOGLE_TPU_V4 == "TPU-V4"
    assert set(accelerators.__all__) == set(compat_names.ACCELERATOR_TYPES)


def test_client_object_ref_modin(cluster):
    """Modin (engine_wrapper.py, utils.py): `from ray.util.client.common import ClientObjectRef`,
    then `isinstance(x, (ray.ObjectRef, ClientObjectRef))`. raylite's refs are one type with or
    without Ray Client, so no ref is a ClientObjectRef, and every ref passes the tuple check."""
    from raylite.util.client.common import ClientObjectRef

    ref = raylite.put(1)
    assert isinstance(ref, (raylite.ObjectRef, ClientObjectRef)) and not isinstance(ref, ClientObjectRef)
    assert issubclass(ClientObjectRef, raylite.ObjectRef)
    assert pickle.loads(pickle.dumps(ClientObjectRef)) is ClientObjectRef


RAY_PATHS = {  # Ray's dotted path -> raylite's object that must be it
    "ray._private.worker:global_worker": (worker, "global_worker"),
    "ray._private.worker:WORKER_MODE": (worker, "WORKER_MODE"),
    "ray._private.services:get_node_ip_address": (services, "get_node_ip_address"),
    "ray._private.state:available_resources_per_node": (state, "available_resources_per_node"),
    "ray._private.state:total_resources_per_node": (state, "total_resources_per_node"),
    "ray._private.ray_constants:env_integer": (ray_constants, "env_integer"),
    "ray.util.client.common:ClientObjectRef": (compat_names, "ClientObjectRef"),
    "ray.util.accelerators:NVIDIA_TESLA_V100": (compat_names, None),
    "ray.types:ObjectRef": ("raylite.types", "ObjectRef"),
    "ray:ObjectID": (raylite, "ObjectRef"),
    "ray:logger": (compat_names, "logger"),
    "ray.util:get_node_ip_address": ("raylite.util", "get_node_ip_address"),
}


@pytest.mark.skipif(not alias_installed(), reason="compat/ray is not installed: pip install -e ./compat/ray")
@pytest.mark.parametrize("path", sorted(RAY_PATHS))
def test_rays_paths_resolve_to_these_names(path):
    module_name, attr = path.split(":")
    got = getattr(importlib.import_module(module_name), attr)
    owner, real_attr = RAY_PATHS[path]
    if real_attr is None:
        assert got == compat_names.ACCELERATOR_TYPES[attr]
        return
    owner = importlib.import_module(owner) if isinstance(owner, str) else owner
    assert got is getattr(owner, real_attr)


@pytest.mark.skipif(not alias_installed(), reason="compat/ray is not installed: pip install -e ./compat/ray")
def test_attribute_paths_after_a_bare_import_ray():
    """Code written for Ray reads `ray._private.worker.global_worker` and `ray.ray_constants`
    after a bare `import ray` (Ray's `__init__` imports them); here they load on first use."""
    out = run_python("import ray\n"
                     "print(ray._private.worker.global_worker.mode, ray.ray_constants.DEFAULT_PORT, "
                     "ray._private.state.total_resources_per_node.__name__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None 6379 total_resources_per_node"
