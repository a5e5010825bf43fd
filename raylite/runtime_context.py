"""get_runtime_context(): ids and resources of the calling driver, task or actor.

Ray 2.60's whole public RuntimeContext: the get_* methods (hex strings or None), the
properties, and the deprecated id properties (`.job_id`, `.node_id`, `.task_id`, `.actor_id`,
`.current_placement_group_id`, `get()`, `get_resource_ids()`), which warn as in Ray."""

from __future__ import annotations

import os
import warnings
from typing import Any

from raylite._core import resources as R
from raylite._core import runtime
from raylite._core.task_spec import KIND_ACTOR_CALL

# the accelerator kinds Ray reports besides GPUs (get_accelerator_ids)
_OTHER_ACCELERATORS = ("neuron_cores", "TPU", "NPU", "HPU", "RBLN", "FURIOSA", "MBLT", "TTNPU")


class RuntimeContext:
    """A view of where the calling code runs. Ids are hex strings, as in Ray."""

    def _client(self) -> Any:
        from raylite import api

        return api.ensure_initialized()

    @property
    def worker(self) -> Any:
        """Ray's half-private worker object (libraries compare `.worker.mode` with WORKER_MODE
        to tell a driver from a worker): raylite/_private/compat_names.py."""
        from raylite._private.compat_names import global_worker

        return global_worker

    def get_job_id(self) -> str:
        return self._client().job_id.hex()

    @property
    def job_id(self) -> Any:
        from raylite._core.ids import JobID

        _deprecated("Use get_job_id() instead")
        return JobID(self._client().job_id)

    def get_node_id(self) -> str:
        return self._client().node_id.hex()

    @property
    def node_id(self) -> Any:
        from raylite._core.ids import NodeID

        _deprecated("Use get_node_id() instead")
        return NodeID(self._client().node_id)

    def get(self) -> dict[str, Any]:
        """The context as a dict (deprecated in Ray: use the get_*_id() methods): job_id,
        node_id and namespace, and in a worker the task_id and actor_id that are set."""
        from raylite._core.ids import ActorID, JobID, NodeID, TaskID

        _deprecated("Use get_xxx_id() methods to get relevant ids instead")
        client = self._client()
        out: dict[str, Any] = {"job_id": JobID(client.job_id), "node_id": NodeID(client.node_id),
                               "namespace": self.namespace}
        w = runtime.worker()
        if w is not None:
            task_id = w.running_task_id()
            if task_id:
                out["task_id"] = TaskID(task_id)
            if w.ctx.actor_id:
                out["actor_id"] = ActorID(w.ctx.actor_id)
        return out

    def get_temp_dir(self) -> str:
        """The directory under which this node keeps its sessions."""
        return os.path.dirname(self._client().session_dir)

    def get_session_name(self) -> str:
        """The name of the cluster's session (its directory's name), the same on every node."""
        return os.path.basename(self._client().session_dir)

    def get_worker_id(self) -> str:
        return self._client().worker_id.hex()

    def get_task_id(self) -> str | None:
        w = runtime.worker()
        task_id = w.running_task_id() if w is not None else b""
        return task_id.hex() if task_id else None

    @property
    def task_id(self) -> Any:
        from raylite._core.ids import TaskID

        _deprecated("Use get_task_id() instead")
        w = _in_worker("task_id")
        task_id = w.running_task_id()
        return TaskID(task_id) if task_id else None

    def get_task_name(self) -> str | None:
        w = runtime.worker()
        return w.ctx.task_name if w is not None else None

    def get_task_function_name(self) -> str | None:
        """`module.function` for a task, `module.Class.method` for an actor call (None in a
        driver)."""
        w = runtime.worker()
        spec = w.ctx.current_spec if w is not None else None
        if spec is None:
            return None
        # Ray's spelling: module plus the function's (or class's) own name, except that an async
        # actor's calls carry the class's full qualified name (`f.<locals>.Cls.method`)
        if spec.kind == KIND_ACTOR_CALL and w.actor_spec is not None:
            fn = w.actor_spec.function
            cls = fn.qualname if w.actor_spec.is_async else fn.qualname.rsplit(".", 1)[-1]
            return f"{fn.module}.{cls}.{spec.method_name}"
        return f"{spec.function.module}.{spec.function.qualname.rsplit('.', 1)[-1]}"

    @property
    def actor_id(self) -> Any:
        from raylite._core.ids import ActorID

        _deprecated("Use get_actor_id() instead")
        w = _in_worker("actor_id")
        return ActorID(w.ctx.actor_id) if w.ctx.actor_id else None

    def get_actor_id(self) -> str | None:
        w = runtime.worker()
        return w.ctx.actor_id.hex() if w is not None and w.ctx.actor_id else None

    @property
    def current_actor(self):
        """A handle to the actor this code runs in (only inside an actor)."""
        w = runtime.worker()
        if w is None or w.actor_spec is None:
            raise RuntimeError("current_actor is only available inside an actor's methods.")
        from raylite.actor import ActorHandle

        spec = w.actor_spec
        return ActorHandle(spec.actor_id, spec.function.qualname, dict(spec.method_meta),
                           spec.max_task_retries, owned=False)

    def get_actor_name(self) -> str | None:
        """The actor's name: "" for an unnamed actor, None outside an actor (as in Ray)."""
        w = runtime.worker()
        if w is None or w.actor_spec is None:
            return None
        return w.ctx.actor_name or ""

    @property
    def namespace(self) -> str:
        w = runtime.worker()
        if w is not None and w.ctx.namespace:
            return w.ctx.namespace
        return self._client().namespace

    def get_namespace(self) -> str:
        return self.namespace

    def get_assigned_resources(self) -> dict[str, float]:
        w = runtime.worker()
        if w is None:
            return {}
        out: dict[str, float] = {}
        for k, v in R.from_fixed(w.ctx.assigned_resources or {}).items():
            base = k.split("_group_")[0]
            if base == "bundle":
                continue
            out[base] = max(out.get(base, 0), v)
        return out

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        """The accelerator devices this task or actor holds, per kind, with Ray's keys (every
        kind listed, empty where it holds none), as strings."""
        w = runtime.worker()
        gpus = [str(i) for i in w.ctx.gpu_ids] if w is not None else []
        held = w.ctx.device_ids if w is not None else {}
        return {"GPU": gpus, **{kind: [str(i) for i in held.get(kind, ())] for kind in _OTHER_ACCELERATORS}}

    def get_resource_ids(self) -> dict[str, list[str]]:
        _deprecated("Use get_accelerator_ids() instead")
        return self.get_accelerator_ids()

    def get_node_labels(self) -> dict[str, str]:
        """This node's labels, with Ray's built-in `ray.io/node-id` (every node carries it)."""
        from raylite import api
        from raylite._core.labels import NODE_ID_LABEL

        node_id = self.get_node_id()
        labels = next((n["Labels"] for n in api.nodes() if n["NodeID"] == node_id), {})
        return {**labels, NODE_ID_LABEL: node_id}

    def is_canceled(self) -> bool:
        """Whether raylite.cancel() was called on the running task (so it can clean up and
        stop). Only in a task or a sync actor's call, as in Ray."""
        w = runtime.worker()
        if w is None:
            raise RuntimeError("is_canceled() is only available inside a task or actor call, not "
                               "in a driver.")
        if w.actor_spec is not None and w.actor_spec.is_async:
            raise RuntimeError("This method is not supported in an async actor. (is_canceled(): "
                               "cancel() raises asyncio.CancelledError in the call instead.)")
        return w.cancelled_here()

    @property
    def current_placement_group_id(self) -> Any:
        from raylite._core.ids import PlacementGroupID

        _deprecated("Use get_placement_group_id() instead")
        pg = self.get_placement_group_id()
        return PlacementGroupID.from_hex(pg) if pg else PlacementGroupID.nil()

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        """Whether tasks started here without a strategy run in the caller's placement group
        (placement_group_capture_child_tasks=True); False in a driver."""
        w = runtime.worker()
        spec = w.ctx.current_spec if w is not None else None
        return bool(spec is not None and spec.capture_pg)

    def get_placement_group_id(self) -> str | None:
        w = runtime.worker()
        if w is None:
            return None
        for k in w.ctx.assigned_resources or {}:
            if "_group_" in k:
                return k.rsplit("_", 1)[-1]
        return None

    @property
    def gcs_address(self) -> str:
        return self._client().head_address

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether this actor has been restarted (asked of the head once per process: a
        restarted actor is a new process)."""
        w = runtime.worker()
        if w is None or w.actor_spec is None:
            raise RuntimeError("was_current_actor_reconstructed is only available inside an actor.")
        known = getattr(w, "_reconstructed", None)
        if known is None:
            known = w._reconstructed = self._client().actor_restarts(w.actor_spec.actor_id) != 0
        return known

    def get_runtime_env_string(self) -> str:
        import json

        from raylite import api

        return json.dumps(api.job_runtime_env())

    @property
    def runtime_env(self) -> dict:
        from raylite import api

        return dict(api.job_runtime_env())


def _deprecated(message: str) -> None:
    warnings.warn(f"This API is deprecated and may be removed in future releases. {message}",
                  DeprecationWarning, stacklevel=3)


def _in_worker(what: str) -> Any:
    w = runtime.worker()
    if w is None:
        raise AssertionError(f"RuntimeContext.{what} is only available in a worker (a task or "
                             "an actor), not in a driver.")
    return w


def get_runtime_context() -> RuntimeContext:
    """The context of this driver, task or actor. Before init() it starts (or joins) a cluster
    first, as Ray's auto-init does: its job, node and namespace exist only then."""
    if runtime.worker() is None and runtime.client() is None:
        from raylite import api

        api.ensure_initialized()
    return RuntimeContext()
