"""A Dask scheduler that runs every task of a Dask graph as a raylite task.

Dask hands a scheduler a graph (key -> task) and the keys it wants. This one walks the graph in
dependency order and submits each task at once, passing the object refs of its dependencies as
arguments: raylite's own scheduler starts a task when its inputs exist, and intermediate results
stay in the object store (never round-trip through the driver). Only the wanted keys are fetched.

Graph nodes:
* a Task runs remotely (`node(values_of_its_dependencies)`),
* a DataNode (a literal in the graph) is `put` once,
* an Alias reuses the ref of its target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import raylite


def _execute(node: Any, dep_keys: list[Any], *dep_values: Any) -> Any:
    """Runs in a worker: the dependencies arrive as values (raylite resolved the refs)."""
    return node(dict(zip(dep_keys, dep_values)))


_REMOTE: dict[str, Any] = {}


def _remote_execute() -> Any:
    if "f" not in _REMOTE:
        _REMOTE["f"] = raylite.remote(_execute)
    return _REMOTE["f"]


def _graph_nodes(dsk: Any) -> Mapping[Any, Any]:
    try:
        from dask._task_spec import convert_legacy_graph
    except ImportError as exc:  # dask < 2024.12 has no task spec
        raise ImportError("raylite.util.dask needs dask >= 2024.12: `pip install -U dask`") from exc
    if not isinstance(dsk, Mapping):
        dsk = dsk.__dask_graph__()
    return convert_legacy_graph(dsk)


def _wanted_in_order(graph: Mapping[Any, Any], wanted: set[Any]) -> list[Any]:
    """The keys `wanted` needs, dependencies before dependents (iterative: graphs can be deep)."""
    order: list[Any] = []
    state: dict[Any, bool] = {}  # False: being visited, True: done
    for root in wanted:
        stack = [(root, False)]
        while stack:
            key, expanded = stack.pop()
            if expanded:
                state[key] = True
                order.append(key)
                continue
            if key in state:
                continue
            if key not in graph:
                raise KeyError(f"the Dask graph has no task for key {key!r}")
            state[key] = False
            stack.append((key, True))
            stack.extend((dep, False) for dep in graph[key].dependencies if dep not in state)
    return order


def _flatten(keys: Any) -> list[Any]:
    if isinstance(keys, list):
        return [k for sub in keys for k in _flatten(sub)]
    return [keys]


def _nested(keys: Any, values: Mapping[Any, Any]) -> Any:
    if isinstance(keys, list):
        return [_nested(k, values) for k in keys]
    return values[keys]


def _submit_graph(dsk: Any, keys: Any, ray_remote_args: dict[str, Any] | None, one_at_a_time: bool) -> dict[Any, Any]:
    """Submit the tasks the wanted keys need; the refs of the wanted keys, by key."""
    if not raylite.is_initialized():
        raylite.init()
    graph = _graph_nodes(dsk)
    wanted = set(_flatten(keys))
    order = _wanted_in_order(graph, wanted)
    from dask._task_spec import Alias, DataNode

    dependents_left: dict[Any, int] = dict.fromkeys(order, 0)
    for key in order:
        for dep in graph[key].dependencies:
            dependents_left[dep] += 1
    runner = _remote_execute()
    if ray_remote_args:
        runner = runner.options(**ray_remote_args)
    refs: dict[Any, Any] = {}
    for key in order:
        node = graph[key]
        deps = list(node.dependencies)
        if isinstance(node, Alias) and len(deps) == 1:
            refs[key] = refs[deps[0]]
        elif isinstance(node, DataNode):
            refs[key] = raylite.put(node.value)
        else:
            refs[key] = runner.remote(node, deps, *(refs[d] for d in deps))
            if one_at_a_time:
                raylite.get(refs[key])  # raises here, at the failing task
        for dep in deps:  # the store keeps a value while a submitted task still needs it
            dependents_left[dep] -= 1
            if dependents_left[dep] == 0 and dep not in wanted:
                del refs[dep]
    return {k: refs[k] for k in wanted}


def ray_dask_get(dsk: Any, keys: Any, ray_remote_args: dict[str, Any] | None = None,
                 ray_persist: bool = False, **kwargs: Any) -> Any:
    """Compute `keys` of the Dask graph `dsk` with every task a raylite task.

    Use as `dask.compute(x, scheduler=ray_dask_get)` or through `enable_dask_on_ray()`.
    `ray_remote_args` are task options for every task; with `ray_persist=True` the results are
    returned as object refs (for `dask.persist`) instead of values. Other keyword arguments Dask
    passes to schedulers (`num_workers`, `pool`, ...) have no meaning here and are ignored.
    """
    refs = _submit_graph(dsk, keys, ray_remote_args, one_at_a_time=False)
    if ray_persist:
        return _nested(keys, refs)
    wanted = list(refs)
    return _nested(keys, dict(zip(wanted, raylite.get([refs[k] for k in wanted]))))


def ray_dask_get_sync(dsk: Any, keys: Any, ray_remote_args: dict[str, Any] | None = None,
                      ray_persist: bool = False, **kwargs: Any) -> Any:
    """Like `ray_dask_get`, but each task is submitted only after the one before it finished.

    For debugging: one task runs at a time, in a fixed order, and an error surfaces at the task
    that raised it.
    """
    refs = _submit_graph(dsk, keys, ray_remote_args, one_at_a_time=True)
    if ray_persist:
        return _nested(keys, refs)
    wanted = list(refs)
    return _nested(keys, dict(zip(wanted, raylite.get([refs[k] for k in wanted]))))
