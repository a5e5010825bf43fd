"""raylite: a small, fast, Ray-compatible distributed computing framework.

    import raylite as ray
    ray.init()

    @ray.remote
    def square(x):
        return x * x

    print(ray.get([square.remote(i) for i in range(4)]))

`data`, `train`, `serve`, `util` and `dag` load on first use, so `import raylite` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public names and the module that defines each. They load on first use (PEP 562), so
# `import raylite` costs a millisecond and processes that only need the core (the node
# daemon, forked workers) never import the public API modules at all.
_LAZY_ATTRIBUTES = {
    "exceptions": ("raylite.exceptions", None),
    "ActorClass": ("raylite.actor", "ActorClass"),
    "ActorHandle": ("raylite.actor", "ActorHandle"),
    "exit_actor": ("raylite.actor", "exit_actor"),
    "method": ("raylite.actor", "method"),
    "available_resources": ("raylite.api", "available_resources"),
    "cancel": ("raylite.api", "cancel"),
    "cluster_resources": ("raylite.api", "cluster_resources"),
    "get": ("raylite.api", "get"),
    "get_actor": ("raylite.actor", "get_actor"),
    "get_gpu_ids": ("raylite.api", "get_gpu_ids"),
    "is_initialized": ("raylite.api", "is_initialized"),
    "kill": ("raylite.actor", "kill"),
    "list_named_actors": ("raylite.api", "list_named_actors"),
    "nodes": ("raylite.api", "nodes"),
    "put": ("raylite.api", "put"),
    "shutdown": ("raylite.api", "shutdown"),
    "timeline": ("raylite.dashboard.timeline", "timeline"),
    "wait": ("raylite.api", "wait"),
    "DynamicObjectRefGenerator": ("raylite.object_ref", "DynamicObjectRefGenerator"),
    "ObjectRef": ("raylite.object_ref", "ObjectRef"),
    "ObjectRefGenerator": ("raylite.object_ref", "ObjectRefGenerator"),
    "RemoteFunction": ("raylite.remote_function", "RemoteFunction"),
    "get_runtime_context": ("raylite.runtime_context", "get_runtime_context"),
    # names libraries read from Ray's package (raylite/_private/compat_names.py says who)
    "ObjectID": ("raylite.object_ref", "ObjectRef"),  # Ray's older name: the same class, as in Ray
    # Ray's id types (hex(), binary(), from_hex(), nil(), is_nil()), as `ray.NodeID` etc.
    "ActorID": ("raylite._core.ids", "ActorID"),
    "JobID": ("raylite._core.ids", "JobID"),
    "NodeID": ("raylite._core.ids", "NodeID"),
    "PlacementGroupID": ("raylite._core.ids", "PlacementGroupID"),
    "TaskID": ("raylite._core.ids", "TaskID"),
    "WorkerID": ("raylite._core.ids", "WorkerID"),
    # Ray's worker modes (ray.SCRIPT_MODE is what global_worker.mode is in a driver)
    "SCRIPT_MODE": ("raylite._private.worker", "SCRIPT_MODE"),
    "WORKER_MODE": ("raylite._private.worker", "WORKER_MODE"),
    "logger": ("raylite._private.compat_names", "logger"),
    "ray_constants": ("raylite._private.ray_constants", None),
}

__version__ = "0.1.0"

_LAZY_SUBMODULES = {"data", "train", "serve", "util", "dag", "tune", "air", "job_submission", "dashboard",
                    "experimental", "cloudpickle", "types", "job_config", "_raylet", "_private", "_common"}


def init(address: str | None = None, **kwargs: Any) -> Any:
    """Start a local cluster (or connect to one) and make this process its driver.

    Takes Ray's `init()` arguments (see `raylite.api.init`). A local cluster's daemon is
    spawned before the driver's own modules are imported, so the two start-ups overlap.
    """
    from raylite._core.cluster import launch

    launch.prestart(address, kwargs)
    try:
        from raylite.api import init as init_driver

        return init_driver(address, **kwargs)
    finally:
        launch.drop_prestarted()  # not adopted (init failed, or it connected elsewhere)


def remote(*args: Any, **options: Any) -> Any:
    """Make a function a task or a class an actor: `@remote` or `@remote(num_cpus=2, ...)`."""
    import inspect

    if len(args) == 1 and not options and (inspect.isfunction(args[0]) or inspect.isclass(args[0])
                                           or callable(args[0])):
        return _make_remote(args[0], {})
    if args or not options:  # `@remote()` too: Ray refuses the empty call
        raise TypeError("The @raylite.remote decorator must be applied either with no arguments and "
                        "no parentheses, e.g. '@raylite.remote', or with keyword arguments only, "
                        "e.g. '@raylite.remote(num_gpus=1)'.")

    def decorator(target: Any) -> Any:
        return _make_remote(target, options)

    return decorator


def _make_remote(target: Any, options: dict) -> Any:
    import inspect

    from raylite.actor import ActorClass
    from raylite.remote_function import RemoteFunction

    if inspect.isclass(target):
        return ActorClass(target, options)
    if inspect.iscoroutinefunction(target):
        # refused here, as Ray does, not as an unpicklable coroutine when the task runs
        name = getattr(target, "__name__", type(target).__name__)
        raise ValueError(f"{name} is an `async def` function: a remote task must be a plain function. "
                         f"Run it in one: `def run(*args): return asyncio.run({name}(*args))`, or make it "
                         "a method of an async actor (a class whose methods are `async def`).")
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"@raylite.remote needs a function or a class, got {type(target).__name__}")


def __getattr__(name: str) -> Any:
    lazy = _LAZY_ATTRIBUTES.get(name)
    if lazy is not None:
        module = importlib.import_module(lazy[0])
        value = module if lazy[1] is None else getattr(module, lazy[1])
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"raylite.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'raylite' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES) | _LAZY_SUBMODULES)


__all__ = [
    "ActorClass", "ActorHandle", "DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator",
    "RemoteFunction", "available_resources", "cancel", "cluster_resources", "exceptions", "exit_actor",
    "get", "get_actor", "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "kill",
    "list_named_actors", "method", "nodes", "put", "remote", "shutdown", "timeline", "wait",
]
