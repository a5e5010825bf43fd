"""Ray's task and actor options: the table of valid names, defaults and validation.

Errors name the option, the value and what is allowed, so a typo is caught at
decoration time rather than deep inside the scheduler.
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any

from raylite._core import accelerators, labels
from raylite._core import resources as R

TASK_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "memory", "num_returns", "max_retries",
    "retry_exceptions", "name", "runtime_env", "scheduling_strategy", "accelerator_type",
    "max_calls", "placement_group", "placement_group_bundle_index",
    "placement_group_capture_child_tasks", "_metadata", "label_selector", "enable_task_events",
    "_labels", "object_store_memory", "concurrency_group", "fallback_strategy",
}
ACTOR_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "memory", "max_restarts", "max_task_retries",
    "max_concurrency", "name", "namespace", "lifetime", "get_if_exists", "runtime_env",
    "scheduling_strategy", "accelerator_type", "max_pending_calls", "concurrency_groups",
    "placement_group", "placement_group_bundle_index", "placement_group_capture_child_tasks",
    "_metadata", "label_selector", "enable_task_events", "object_store_memory",
    "allow_out_of_order_execution", "_labels", "fallback_strategy",
}
METHOD_OPTIONS = {"num_returns", "concurrency_group", "max_task_retries", "retry_exceptions",
                  "name", "enable_task_events", "_generator_backpressure_num_objects",
                  "tensor_transport"}
_IGNORED_WITH_WARNING = {"_metadata",
                         "enable_task_events", "_labels", "object_store_memory",
                         "max_pending_calls", "allow_out_of_order_execution",
                         "_generator_backpressure_num_objects", "tensor_transport"}


_NONE = type(None)
# Ray's type constraint of each option, as Ray spells it in its TypeError (the tuple's repr)
_TYPES: dict[str, tuple[type, ...]] = {
    "label_selector": (dict, _NONE), "fallback_strategy": (list, _NONE), "accelerator_type": (str, _NONE),
    "memory": (float, int, _NONE), "name": (str, _NONE), "num_cpus": (float, int, _NONE),
    "num_gpus": (float, int, _NONE), "object_store_memory": (int, _NONE),
    "placement_group_bundle_index": (int,), "placement_group_capture_child_tasks": (bool, _NONE),
    "resources": (dict, _NONE), "runtime_env": (dict, _NONE), "enable_task_events": (bool,),
    "_labels": (dict, _NONE), "max_calls": (int, _NONE), "max_retries": (int, _NONE),
    "num_returns": (int, str, _NONE), "retry_exceptions": (bool, list, tuple),
    "_generator_backpressure_num_objects": (int, _NONE), "concurrency_groups": (list, dict, _NONE),
    "lifetime": (str, _NONE), "max_concurrency": (int, _NONE), "max_restarts": (int, _NONE),
    "max_task_retries": (int, _NONE), "max_pending_calls": (int, _NONE), "namespace": (str, _NONE),
    "get_if_exists": (bool,), "allow_out_of_order_execution": (bool, _NONE),
}
_RESOURCE_UNIT = 10000  # a fractional resource amount finer than 1/10000 is refused, as in Ray


def _check_type(key: str, value: Any) -> None:
    types = _TYPES.get(key)
    if types is not None and not isinstance(value, types):
        raise TypeError(f"The type of keyword '{key}' must be {types if len(types) > 1 else types[0]}, "
                        f"but received type {type(value)}")


def _check_precision(name: str, quantity: Any) -> None:
    if isinstance(quantity, float) and quantity != 0.0 and int(quantity * _RESOURCE_UNIT) == 0:
        raise ValueError(f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001")


def validate(options: dict[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    for key, value in options.items():
        if key not in allowed:
            public = sorted(k for k in allowed if not k.startswith("_"))
            close = difflib.get_close_matches(str(key), public, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Invalid option keyword {key!r} for {where}.{hint} Valid ones are: "
                             f"{', '.join(public)}.")
        _check_type(key, value)
        _check_value(key, value, where)
    return options


def _check_value(key: str, value: Any, where: str) -> None:
    if key in ("num_cpus", "num_gpus", "memory") and value is not None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key} of {where} must be a non-negative number, got {value!r}.")
        _check_precision(key, value)
    elif key == "resources" and value is not None:
        if not isinstance(value, dict):
            raise TypeError(f"resources of {where} must be a dict like {{'TPU': 1}}, got {value!r}.")
        for name, amount in value.items():
            if name in ("CPU", "GPU", "memory"):
                raise ValueError(f"Use the num_cpus/num_gpus/memory options instead of resources[{name!r}] for {where}.")
            if not isinstance(amount, (int, float)) or amount < 0:
                raise ValueError(f"resources[{name!r}] of {where} must be a non-negative number, got {amount!r}.")
            _check_precision(name, amount)
    elif key == "num_returns" and value is not None:
        if not (value in ("streaming", "dynamic") or (isinstance(value, int) and value >= 0)):
            raise ValueError(f"The keyword 'num_returns' only accepts None, a non-negative integer, 'streaming' "
                             f"(for generators), or 'dynamic' ({where} got {value!r}).")
    elif key in ("max_retries", "max_restarts", "max_task_retries") and value is not None:
        if not isinstance(value, int) or value < -1:
            raise ValueError(f"The keyword '{key}' only accepts None, 0, -1 or a positive integer, where -1 "
                             f"represents infinity ({where} got {value!r}).")
    elif key == "max_calls" and value is not None and value < 0:
        raise ValueError(f"The keyword 'max_calls' only accepts None, 0 or a positive integer ({where} got {value!r}).")
    elif key == "max_concurrency" and value is not None:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"max_concurrency of {where} must be a positive int, got {value!r}.")
    elif key == "accelerator_type" and value is not None:
        accelerators.request_resources(value, where)  # raises on a malformed name
    elif key == "concurrency_groups" and value is not None:
        _check_concurrency_groups(value, where)
    elif key == "lifetime" and value not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime of {where} must be 'detached' or 'non_detached', got {value!r}.")
    elif key == "label_selector" and value is not None:
        if not isinstance(value, dict):
            raise TypeError(f"The type of keyword 'label_selector' must be (dict, NoneType), but received "
                            f"type {type(value)} for {where}.")
        error = labels.label_selector_error(value)
        if error:
            raise ValueError(error)
    elif key == "fallback_strategy" and value is not None:
        if not isinstance(value, list):
            raise TypeError(f"The type of keyword 'fallback_strategy' must be (list, NoneType), but received "
                            f"type {type(value)} for {where}.")
        error = labels.fallback_strategy_error(value)
        if error:
            raise ValueError(error)
    elif key == "retry_exceptions" and value is not None:
        if not isinstance(value, bool) and not (
                isinstance(value, (list, tuple)) and all(isinstance(v, type) and issubclass(v, BaseException) for v in value)):
            raise TypeError(f"retry_exceptions of {where} must be a bool or a list of exception types, got {value!r}.")
    if key in _IGNORED_WITH_WARNING and value not in (None, False, {}):
        warnings.warn(f"raylite ignores the option {key}={value!r} of {where} (accepted for Ray compatibility).",
                      stacklevel=4)


def _check_concurrency_groups(groups: Any, where: str) -> None:
    """{name: max_concurrency}: each group runs at most that many calls at once (>= 1)."""
    if not isinstance(groups, dict):
        raise TypeError(f"concurrency_groups of {where} must be a dict like {{'io': 2}} (group name -> "
                        f"max_concurrency), got {groups!r}.")
    for name, size in groups.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"concurrency_groups of {where}: group names must be non-empty strings, "
                             f"got {name!r}.")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"concurrency_groups of {where}: max_concurrency must be greater than 0 (group "
                             f"{name!r} has {size!r}); give each group a positive int.")


def check_generator_returns(num_returns: Any, is_generator: bool, where: str) -> None:
    """num_returns='streaming' or 'dynamic' asks for a generator: refused at once (decoration,
    .options(), @method) for a plain function, as in Ray, instead of failing in the worker."""
    if num_returns in ("streaming", "dynamic") and not is_generator:
        raise ValueError(f"num_returns={num_returns!r} can only be used with generator functions "
                         f"(functions that use 'yield'); {where} is not a generator function. "
                         "Make it yield its values, or drop num_returns.")


def resolve_num_returns(num_returns: Any, is_generator: bool) -> Any:
    """num_returns=None means the default: 'streaming' for a generator, 1 otherwise (Ray)."""
    if num_returns is None:
        return "streaming" if is_generator else 1
    return num_returns


# Resources whose units are devices handed out one by one (Ray's "unit instance" resources): a
# share of one device is fine, but more than one must be whole devices
UNIT_INSTANCE_RESOURCES = frozenset({"GPU", "TPU", "neuron_cores", "NPU", "HPU", "RBLN"})


def resource_request(options: dict[str, Any], *, default_cpus: float) -> dict[str, int]:
    """Fixed-point resource request from num_cpus/num_gpus/memory/resources."""
    req: dict[str, float] = {}
    cpus = options.get("num_cpus")
    req["CPU"] = default_cpus if cpus is None else cpus
    if options.get("num_gpus"):
        req["GPU"] = options["num_gpus"]
    if options.get("memory"):
        req["memory"] = options["memory"]
    for name, amount in (options.get("resources") or {}).items():
        req[name] = amount
    if options.get("accelerator_type"):
        req.update(accelerators.request_resources(options["accelerator_type"], "this request"))
    for name in UNIT_INSTANCE_RESOURCES.intersection(req):
        amount = req[name]
        if amount > 1 and amount != int(amount):
            raise ValueError(f"{name} resource quantities >1 must be whole numbers. The specified quantity "
                             f"{amount} is invalid: ask for a share of one device (at most 1) or for whole "
                             "devices.")
    return R.to_fixed(req)
