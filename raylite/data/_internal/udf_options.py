"""A UDF's options -> the settings of the logical operator that runs it.

``compute=`` / ``concurrency=`` give the compute strategy (tasks, or a pool of actors for a
callable class); ``num_cpus=`` / ``num_gpus=`` / ``memory=`` plus Ray's remote args give the
validated remote args; the UDF's name goes into the operator's name. Shared by Dataset's
transforms and GroupedData.map_groups.
"""

from __future__ import annotations

from typing import Any

from raylite.data._internal import logical as L
from raylite.data._internal.submitter import TaskOptions


def udf_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def udf_remote_args(num_cpus: float | None, num_gpus: float | None, memory: float | None,
                 extra: dict[str, Any]) -> dict[str, Any]:
    args = dict(extra)
    if num_cpus is not None:
        args["num_cpus"] = num_cpus
    if num_gpus is not None:
        args["num_gpus"] = num_gpus
    if memory is not None:
        args["memory"] = memory
    TaskOptions.from_ray_remote_args(args)  # validates types early
    return args


def udf_compute(fn: Any, compute: Any, concurrency: Any, what: str) -> Any:
    is_class = isinstance(fn, type)
    if compute is not None and not isinstance(compute, (L.ActorPoolStrategy, L.TaskPoolStrategy)):
        if compute == "tasks":
            compute = None
        elif compute == "actors":
            compute = L.ActorPoolStrategy(min_size=1, max_size=None)
        else:
            raise ValueError(f"compute must be 'tasks', ActorPoolStrategy or TaskPoolStrategy, got {compute!r}")
    if is_class:
        if not callable(getattr(fn, "__call__", None)):  # noqa: B004
            raise ValueError(f"{what}: class {fn.__name__} must define __call__ to be used as a UDF")
        if isinstance(compute, L.ActorPoolStrategy):
            return compute
        if concurrency is None:
            raise ValueError(
                f"{what}: ``concurrency`` must be specified when using a callable class "
                f"({fn.__name__}). Use concurrency=n for a pool of n actors, or (min, max) to autoscale."
            )
        if isinstance(concurrency, tuple):
            return L.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1])
        return L.ActorPoolStrategy(size=int(concurrency))
    if not callable(fn):
        raise TypeError(f"{what}: expected a function or callable class, got {type(fn).__name__}")
    if isinstance(concurrency, tuple):
        raise ValueError(f"{what}: a (min, max) concurrency needs a callable class; functions take an int")
    if concurrency is not None:
        return L.TaskPoolStrategy(size=int(concurrency))
    return compute
