"""get_runtime_context(): ids and resources of the calling driver, task or actor."""

from __future__ import annotations

from typing import Any

from raylite._core import resources as R
from raylite._core import runtime


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

        return JobID(self._client().job_id)

    def get_node_id(self) -> str:
        return self._client().node_id.hex()

    @property
    def node_id(self) -> Any:
        from raylite._core.ids import NodeID

        return NodeID(self._client().node_id)

    def get_worker_id(self) -> str:
        return self._client().worker_id.hex()

    def get_task_id(self) -> str | None:
        w = runtime.worker()
        return w.ctx.task_id.hex() if w is not None and w.ctx.task_id else None

    def get_task_name(self) -> str | None:
        w = runtime.worker()
        return w.ctx.task_name if w is not None else None

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
        w = runtime.worker()
        return (w.ctx.actor_name or None) if w is not None else None

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
        w = runtime.worker()
        return {"GPU": [str(i) for i in w.ctx.gpu_ids] if w is not None else []}

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
        return False

    def get_runtime_env_string(self) -> str:
        import json

        from raylite import api

        return json.dumps(api.job_runtime_env())

    @property
    def runtime_env(self) -> dict:
        from raylite import api

        return dict(api.job_runtime_env())


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext()
