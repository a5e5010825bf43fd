"""Validate and default Serve's options as plain dicts, without importing pydantic.

Why: `import pydantic` and building the config models costs 0.3-1 s on a small machine, which
would be most of `serve.run()`'s start-up budget. The public pydantic models in `config.py` are
still accepted everywhere (anything with `model_dump()`), and their field names and defaults are
the ones below; `tests/serve/unit/test_options.py` checks the two stay in step.
"""

from __future__ import annotations

from typing import Any

DEPLOYMENT_DEFAULTS: dict[str, Any] = {
    "num_replicas": 1, "max_ongoing_requests": 5, "max_queued_requests": -1, "user_config": None,
    "graceful_shutdown_wait_loop_s": 2.0, "graceful_shutdown_timeout_s": 20.0, "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0, "autoscaling_config": None, "logging_config": None,
    "max_request_body_size_bytes": None,  # raylite: the HTTP proxy's limit for this deployment's routes
}
AUTOSCALING_DEFAULTS: dict[str, Any] = {
    "min_replicas": 1, "initial_replicas": None, "max_replicas": 1, "target_ongoing_requests": 2.0,
    "metrics_interval_s": 10.0, "look_back_period_s": 30.0, "smoothing_factor": 1.0,
    "upscale_smoothing_factor": None, "downscale_smoothing_factor": None, "upscaling_factor": None,
    "downscaling_factor": None, "downscale_delay_s": 600.0, "upscale_delay_s": 30.0,
    "aggregation_function": "mean",
}
AUTO_NUM_REPLICAS = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0}
LOGGING_DEFAULTS: dict[str, Any] = {
    "encoding": "TEXT", "log_level": "INFO", "logs_dir": None, "enable_access_log": True,
    "additional_log_standard_attrs": [],
}
HTTP_DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1", "port": 8000, "root_path": "", "request_timeout_s": None, "keep_alive_timeout_s": 5.0,
    "num_cpus": 0, "middlewares": [], "location": "EveryNode",
    # raylite's limits on what a client may send (http_limits.Limits has the same fields)
    "max_header_size_bytes": 16 * 1024, "max_header_count": 100, "max_request_body_size_bytes": 100 * 1024**2,
    "header_read_timeout_s": 30.0, "body_read_timeout_s": 30.0, "max_connections": 10_000,
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
    if d["min_replicas"] > d["max_replicas"]:
        raise ValueError(f"autoscaling_config: min_replicas ({d['min_replicas']}) must not exceed max_replicas "
                         f"({d['max_replicas']})")
    init = d["initial_replicas"]
    if init is not None and not d["min_replicas"] <= init <= d["max_replicas"]:
        raise ValueError(f"autoscaling_config: initial_replicas ({init}) must lie between min_replicas "
                         f"({d['min_replicas']}) and max_replicas ({d['max_replicas']})")
    return d


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
    return d


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
    for key in ("max_header_size_bytes", "max_header_count", "max_request_body_size_bytes", "max_connections"):
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
