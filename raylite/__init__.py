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
import inspect
from typing import Any

from raylite import exceptions
from raylite.actor import ActorClass, ActorHandle, exit_actor, method
from raylite.api import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    init,
    is_initialized,
    kill,
    list_named_actors,
    nodes,
    put,
    shutdown,
    timeline,
    wait,
)
from raylite.object_ref import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite.remote_function import RemoteFunction
from raylite.runtime_context import get_runtime_context

__version__ = "0.1.0"

_LAZY_SUBMODULES = {"data", "train", "serve", "util", "dag", "tune", "job_submission", "dashboard"}


def remote(*args: Any, **options: Any) -> Any:
    """Make a function a task or a class an actor: `@remote` or `@remote(num_cpus=2, ...)`."""
    if len(args) == 1 and not options and (inspect.isfunction(args[0]) or inspect.isclass(args[0])
                                           or callable(args[0])):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("The @raylite.remote decorator must be applied either with no arguments and "
                        "no parentheses, e.g. '@raylite.remote', or with keyword arguments only, "
                        "e.g. '@raylite.remote(num_gpus=1)'.")

    def decorator(target: Any) -> Any:
        return _make_remote(target, options)

    return decorator


def _make_remote(target: Any, options: dict) -> Any:
    if inspect.isclass(target):
        return ActorClass(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"@raylite.remote needs a function or a class, got {type(target).__name__}")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"raylite.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'raylite' has no attribute {name!r}")


__all__ = [
    "ActorClass", "ActorHandle", "DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator",
    "RemoteFunction", "available_resources", "cancel", "cluster_resources", "exceptions", "exit_actor",
    "get", "get_actor", "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "kill",
    "list_named_actors", "method", "nodes", "put", "remote", "shutdown", "timeline", "wait",
]
