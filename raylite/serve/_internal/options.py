"""Validate and default Serve's options as plain dicts, without importing pydantic.

Why: `import pydantic` and building the config models costs 0.3-1 s on a small machine, which
would be most of `serve.run()`'s start-up budget. The public pydantic models in `config.py` are
still accepted everywhere (anything with `model_dump()`), and their field names and defaults are
the ones below; `tests/serve/unit/test_options.py` checks the two stay in step.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raylite.serve._internal import http_limits

DEPLOYMENT_DEFAULTS: dict[str, Any] = {
    "num_replicas": 1, "max_ongoing_requests": 5, "max_queued_requests": -1, "user_config": None,
    "graceful_shutdown_wait_loop_s": 2.0, "graceful_shutdown_timeout_s": 20.0, "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0, "autoscaling_config": None, "logging_config": None,
    "backpressure_config": None, "gang_scheduling_config": None, "max_constructor_retry_count": 20,
    "rolling_update_percentage": 0.2, "max_surge_percent": 0,
    "max_request_body_size_bytes": None,  # raylite: the HTTP proxy's limit for this deployment's routes
}
MAX_REPLICAS_PER_NODE_LIMIT = 100
AUTOSCALING_DEFAULTS: dict[str, Any] = {
    "min_replicas": 1, "initial_replicas": None, "max_replicas": 1, "target_ongoing_requests": 2.0,
    "metrics_interval_s": 10.0, "look_back_period_s": 30.0, "smoothing_factor": 1.0,
    "upscale_smoothing_factor": None, "downscale_smoothing_factor": None, "upscaling_factor": None,
    "downscaling_factor": None, "downscale_delay_s": 600.0, "downscale_to_zero_delay_s": None,
    "upscale_delay_s": 30.0, "aggregation_function": "mean", "policy": None,
}
DEFAULT_POLICY = "ray.serve.autoscaling_policy:default_autoscaling_policy"
AGGREGATION_FUNCTIONS = ("mean", "max", "min")
AUTO_NUM_REPLICAS = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0}
LOGGING_DEFAULTS: dict[str, Any] = {
    "encoding": "TEXT", "log_level": "INFO", "logs_dir": None, "enable_access_log": True,
    "additional_log_standard_attrs": [],
}
HTTP_DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1", "port": 8000, "root_path": "", "request_timeout_s": None, "keep_alive_timeout_s": 5.0,
    "num_cpus": 0, "middlewares": [], "location": "EveryNode",
    # raylite's limits on what a client may send, with the proxy's defaults
    **dataclasses.asdict(http_limits.Limits()),
}
PROXY_LOCATIONS = ("Disabled", "HeadOnly", "EveryNode")


def _as_dict(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_unset=True) if what == "autoscaling_config" else value.model_dump()
    if isinstance(value, dict):
        return dict(value)
    raise TypeError(f"{what} must be a dict or a {what_model(what)}, not {type(value).__name__}")


def what_model(what: str) -> str:
    return {"autoscaling_config": "AutoscalingConfig", "logging_config": "LoggingConfig",
            "http_options": "HTTPOptions"}.get(what, "model")


def _fill(given: dict, defaults: dict, what: str) -> dict:
    unknown = set(given) - set(defaults)
    if unknown:
        raise ValueError(f"{what} has unknown field(s) {sorted(unknown)}; valid fields are {sorted(defaults)}")
    return {**defaults, **given}


def _number(d: dict, key: str, what: str, *, minimum: float | None = None, positive: bool = False,
            integer: bool = False, optional: bool = False) -> None:
    v = d[key]
    if v is None and optional:
        return
    kind = int if integer else (int, float)
    if isinstance(v, bool) or not isinstance(v, kind):
        raise ValueError(f"{what}.{key} must be {'an int' if integer else 'a number'}, not {v!r}")
    if positive and v <= 0:
        raise ValueError(f"{what}.{key} must be > 0, not {v!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{what}.{key} must be >= {minimum}, not {v!r}")


def autoscaling(value: Any, auto: bool = False) -> dict | None:
    if value is None and not auto:
        return None
    given = _as_dict(value, "autoscaling_config")
    model_policy = getattr(value, "policy", None)
    if getattr(model_policy, "_serialized_policy", None):
        given["policy"] = {"policy_function": model_policy.policy_function,
                           "policy_kwargs": dict(model_policy.policy_kwargs),
                           "serialized_policy": model_policy._serialized_policy}
    base = dict(AUTOSCALING_DEFAULTS)
    if auto:
        base.update(AUTO_NUM_REPLICAS)
    d = _fill(given, base, "autoscaling_config")
    w = "autoscaling_config"
    _number(d, "min_replicas", w, minimum=0, integer=True)
    _number(d, "max_replicas", w, minimum=1, integer=True)
    _number(d, "initial_replicas", w, minimum=0, integer=True, optional=True)
    _number(d, "target_ongoing_requests", w, positive=True)
    for key in ("metrics_interval_s", "look_back_period_s", "smoothing_factor"):
        _number(d, key, w, positive=True)
    for key in ("downscale_delay_s", "upscale_delay_s"):
        _number(d, key, w, minimum=0)
    _number(d, "downscale_to_zero_delay_s", w, minimum=0, optional=True)
    agg = str(getattr(d["aggregation_function"], "value", d["aggregation_function"])).lower()
    if agg not in AGGREGATION_FUNCTIONS:
        raise ValueError(f"autoscaling_config.aggregation_function must be one of {list(AGGREGATION_FUNCTIONS)}, "
                         f"not {d['aggregation_function']!r}")
    d["aggregation_function"] = agg
    d["policy"] = autoscaling_policy(d["policy"])
    if d["min_replicas"] > d["max_replicas"]:
        raise ValueError(f"autoscaling_config: min_replicas ({d['min_replicas']}) must not exceed max_replicas "
                         f"({d['max_replicas']})")
    init = d["initial_replicas"]
    if init is not None and not d["min_replicas"] <= init <= d["max_replicas"]:
        raise ValueError(f"autoscaling_config: initial_replicas ({init}) must lie between min_replicas "
                         f"({d['min_replicas']}) and max_replicas ({d['max_replicas']})")
    return d


def autoscaling_policy(value: Any) -> dict | None:
    """A custom policy as {"policy_function": "module:name", "policy_kwargs": {...}} plus
    "serialized_policy": bytes when it was given as an object (pickled by value here). A policy
    named by its import path is imported by the Serve controller when the application is
    deployed (as in Ray), so it may live in a module only the controller's node has; here
    only the path's shape is checked."""
    if value is None:
        return None
    if isinstance(value, str) or callable(value) and not hasattr(value, "model_dump"):
        value = {"policy_function": value}
    d = dict(value.model_dump()) if hasattr(value, "model_dump") else dict(_as_dict(value, "policy"))
    serialized = getattr(value, "_serialized_policy", None) or d.pop("serialized_policy", None)
    if "name" in d and "policy_function" not in d:  # the field's name before Ray 2.50
        d["policy_function"] = d.pop("name")
    unknown = set(d) - {"policy_function", "policy_kwargs"}
    if unknown:
        raise ValueError(f"autoscaling_config.policy has unknown field(s) {sorted(unknown)}; valid fields are "
                         "['policy_function', 'policy_kwargs']")
    fn = d.get("policy_function") or DEFAULT_POLICY
    kwargs = d.get("policy_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"autoscaling_config.policy.policy_kwargs must be a dict, not {type(kwargs).__name__}")
    try:
        json.dumps(kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"autoscaling_config.policy.policy_kwargs must be JSON-serializable: {e}") from None
    if isinstance(fn, str) and (fn in DEFAULT_POLICY_NAMES):
        return {"policy_function": fn, "policy_kwargs": kwargs}
    if serialized:
        return {"policy_function": fn if isinstance(fn, str) else _qualified(fn), "policy_kwargs": kwargs,
                "serialized_policy": serialized}
    if isinstance(fn, str):
        _split_path(fn, "autoscaling_config.policy.policy_function")
        return {"policy_function": fn, "policy_kwargs": kwargs}
    target = fn
    if not callable(target):
        raise TypeError(f"autoscaling_config.policy.policy_function {fn!r} is not a function or class")
    path = fn if isinstance(fn, str) else _qualified(fn)
    return {"policy_function": path, "policy_kwargs": kwargs, "serialized_policy": _dumps_by_value(target)}


DEFAULT_POLICY_NAMES = (DEFAULT_POLICY, "ray.serve.autoscaling_policy:replica_queue_length_autoscaling_policy",
                        "raylite.serve.autoscaling_policy:default_autoscaling_policy",
                        "raylite.serve.autoscaling_policy:replica_queue_length_autoscaling_policy")


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"


def _import_attr(path: str, what: str) -> Any:
    """`module:attr` or `module.attr` imported (the user's code, in the driver)."""
    import importlib

    module_name, attr = _split_path(path, what)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"{what}: cannot import module {module_name!r} ({e}); is it on sys.path?") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _split_path(path: str, what: str) -> tuple[str, str]:
    """('module', 'attr') of 'module:attr' or 'module.attr'; ValueError for anything else."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what} must be an import path like 'my_module:my_policy', not {path!r}")
    return module_name, attr


def _dumps_by_value(obj: Any) -> bytes:
    """Pickle a function or class with its module's code, so the controller needs no import."""
    import sys

    import cloudpickle

    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    registered = False
    if module is not None and module.__name__ != "__main__":
        try:
            cloudpickle.register_pickle_by_value(module)
            registered = True
        except ValueError:
            pass
    try:
        return cloudpickle.dumps(obj)
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(module)


def logging_config(value: Any) -> dict | None:
    if value is None:
        return None
    d = _fill(_as_dict(value, "logging_config"), LOGGING_DEFAULTS, "logging_config")
    enc = str(d["encoding"]).upper()
    if enc not in ("TEXT", "JSON"):
        raise ValueError(f"logging_config.encoding must be 'TEXT' or 'JSON', not {d['encoding']!r}")
    d["encoding"] = enc
    level = d["log_level"]
    if isinstance(level, str):
        if level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"logging_config.log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
                             f"not {level!r}")
        d["log_level"] = level.upper()
    return d


def deployment_config(options: dict) -> dict:
    """The deployment's config dict (Ray's DeploymentConfig fields) from decorator/options kwargs."""
    d = {k: options[k] for k in DEPLOYMENT_DEFAULTS if k in options}
    if "max_concurrent_queries" in options and "max_ongoing_requests" not in d:
        d["max_ongoing_requests"] = options["max_concurrent_queries"]
    d = {**DEPLOYMENT_DEFAULTS, **d}
    w = "deployment"
    nr = d["num_replicas"]
    auto = nr == "auto"
    d["autoscaling_config"] = autoscaling(d["autoscaling_config"], auto=auto)
    if auto or d["autoscaling_config"] is not None:
        d["num_replicas"] = None
    else:
        _number(d, "num_replicas", w, minimum=0, integer=True)
    _number(d, "max_ongoing_requests", w, positive=True, integer=True)
    _number(d, "max_queued_requests", w, minimum=-1, integer=True)
    _number(d, "max_request_body_size_bytes", w, minimum=0, integer=True, optional=True)
    for key in ("graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s"):
        _number(d, key, w, minimum=0)
    for key in ("health_check_period_s", "health_check_timeout_s"):
        _number(d, key, w, positive=True)
    d["logging_config"] = logging_config(d["logging_config"])
    d["backpressure_config"] = backpressure(d["backpressure_config"])
    d["gang_scheduling_config"] = gang(d["gang_scheduling_config"])
    _number(d, "max_constructor_retry_count", w, positive=True, integer=True)
    _number(d, "rolling_update_percentage", w, positive=True)
    if d["rolling_update_percentage"] > 1:
        raise ValueError(f"deployment.rolling_update_percentage must be in (0, 1], not {d['rolling_update_percentage']}")
    _number(d, "max_surge_percent", w, minimum=0, integer=True)
    if d["max_surge_percent"] > 100:
        raise ValueError(f"deployment.max_surge_percent must be in [0, 100], not {d['max_surge_percent']}")
    g = d["gang_scheduling_config"]
    if g and d["autoscaling_config"] is None and d["num_replicas"] % g["gang_size"]:
        raise ValueError(f"num_replicas ({d['num_replicas']}) must be a multiple of gang_size ({g['gang_size']})")
    return d


def backpressure(value: Any) -> dict | None:
    """How a request shed by max_queued_requests is answered over HTTP: {status_code, retry_after_s}."""
    if value is None:
        return None
    d = _fill(_as_dict(value, "backpressure_config"), {"status_code": 503, "retry_after_s": None},
              "backpressure_config")
    if d["status_code"] not in (503, 429) or isinstance(d["status_code"], bool):
        raise ValueError(f"backpressure_config.status_code must be 503 or 429, not {d['status_code']!r}")
    _number(d, "retry_after_s", "backpressure_config", minimum=0, optional=True)
    if d["retry_after_s"] is not None and d["retry_after_s"] == float("inf"):
        raise ValueError("backpressure_config.retry_after_s must be finite")
    return d


def gang(value: Any) -> dict | None:
    """{gang_size, gang_placement_strategy: PACK|SPREAD, runtime_failure_policy: RESTART_GANG}."""
    if value is None:
        return None
    d = _fill(_as_dict(value, "gang_scheduling_config"), {"gang_size": None, "gang_placement_strategy": "PACK",
              "runtime_failure_policy": "RESTART_GANG"}, "gang_scheduling_config")
    _number(d, "gang_size", "gang_scheduling_config", minimum=1, integer=True)
    strategy = str(getattr(d["gang_placement_strategy"], "value", d["gang_placement_strategy"])).upper()
    if strategy not in ("PACK", "SPREAD"):
        raise ValueError(f"gang_scheduling_config.gang_placement_strategy must be PACK or SPREAD, not {strategy!r}")
    policy = str(getattr(d["runtime_failure_policy"], "value", d["runtime_failure_policy"])).upper()
    if policy == "RESTART_REPLICA":
        raise NotImplementedError("gang_scheduling_config.runtime_failure_policy RESTART_REPLICA is not "
                                  "implemented (nor in Ray 2.60); use RESTART_GANG")
    if policy != "RESTART_GANG":
        raise ValueError(f"gang_scheduling_config.runtime_failure_policy must be RESTART_GANG, not {policy!r}")
    return {"gang_size": d["gang_size"], "gang_placement_strategy": strategy, "runtime_failure_policy": policy}


def max_replicas_per_node(value: Any, bundles: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"max_replicas_per_node must be None or an int in [1, {MAX_REPLICAS_PER_NODE_LIMIT}], "
                        f"not {type(value).__name__}")
    if not 1 <= value <= MAX_REPLICAS_PER_NODE_LIMIT:
        raise ValueError(f"max_replicas_per_node must be in [1, {MAX_REPLICAS_PER_NODE_LIMIT}], not {value}")
    if bundles is not None:
        raise ValueError("max_replicas_per_node cannot be combined with placement_group_bundles (as in Ray)")
    return value


def deployment_actors(value: Any) -> list[dict] | None:
    """Each DeploymentActorConfig as {name, class_name, serialized_class, init_args, init_kwargs,
    actor_options}; the actor class is pickled with its module's code."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise TypeError(f"deployment_actors must be a list of DeploymentActorConfig, not {type(value).__name__}")
    out: list[dict] = []
    for item in value:
        if isinstance(item, dict) and "serialized_class" in item:
            out.append(dict(item))
            continue
        d = dict(item) if isinstance(item, dict) else {k: getattr(item, k) for k in (
            "name", "actor_class", "init_args", "init_kwargs", "actor_options")}
        unknown = set(d) - {"name", "actor_class", "init_args", "init_kwargs", "actor_options"}
        if unknown:
            raise ValueError(f"deployment_actors entry has unknown field(s) {sorted(unknown)}")
        name = d.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"each deployment actor needs a non-empty str name, not {name!r}")
        cls = d.get("actor_class")
        if isinstance(cls, str):
            cls = _import_attr(cls, f"deployment_actors[{name!r}].actor_class")
        if not hasattr(cls, "remote") or not hasattr(cls, "options"):
            raise TypeError(f"deployment actor {name!r}: actor_class must be a @ray.remote class (or an import "
                            f"path to one), not {cls!r}")
        opts = d.get("actor_options") or {}
        if not isinstance(opts, dict):
            raise TypeError(f"deployment actor {name!r}: actor_options must be a dict")
        out.append({"name": name, "class_name": _qualified(cls), "serialized_class": _dumps_by_value(cls),
                    "init_args": tuple(d.get("init_args") or ()), "init_kwargs": dict(d.get("init_kwargs") or {}),
                    "actor_options": dict(opts)})
    names = [a["name"] for a in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"deployment_actors names must be unique within a deployment; repeated: {dupes}")
    return out


def http_options(value: Any) -> dict:
    given = _as_dict(value, "http_options")
    for legacy in ("http_host", "http_port"):
        if legacy in given:
            given[legacy[5:]] = given.pop(legacy)
    d = _fill(given, HTTP_DEFAULTS, "http_options")
    if not isinstance(d["host"], str) or not d["host"]:
        raise ValueError(f"http_options.host must be a non-empty str, not {d['host']!r}")
    _number(d, "port", "http_options", minimum=0, integer=True)
    if d["port"] > 65535:
        raise ValueError(f"http_options.port must be <= 65535, not {d['port']}")
    _number(d, "request_timeout_s", "http_options", positive=True, optional=True)
    _number(d, "keep_alive_timeout_s", "http_options", positive=True)
    for key in ("max_header_size_bytes", "max_header_count", "max_request_body_size_bytes", "max_connections",
                "max_buffered_request_body_bytes"):
        _number(d, key, "http_options", minimum=1, integer=True)
    for key in ("header_read_timeout_s", "body_read_timeout_s"):
        _number(d, key, "http_options", positive=True)
    d["location"] = proxy_location(d["location"]) if d["location"] is not None else "EveryNode"
    return d


def proxy_location(value: Any) -> str:
    raw = getattr(value, "value", value)
    for name in PROXY_LOCATIONS:
        if str(raw).replace("_", "").lower() == name.lower():
            return name
    raise ValueError(f"proxy_location must be one of {list(PROXY_LOCATIONS)}, not {value!r}")
