"""Serve config files (`serve run/deploy config.yaml`) under Ray's schema names and fields.

`ServeDeploySchema` is the whole file: proxy location, HTTP options, logging, and the
applications, each an import path plus per-deployment overrides of the options set in code.
Unknown fields are errors (a typo must not be silently ignored); `parse_config_file` turns
pydantic's errors into one message naming the file and the field path, e.g.
`serve.yaml: applications[0].deployments[0].num_replicas: ...`.

A deployment entry records only the fields the file sets (`overrides()`): a field left out keeps
the value from the code, as in Ray.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from raylite.serve._internal.status_types import (
    ApplicationStatus,
    ApplicationStatusOverview,
    DeploymentStatus,
    DeploymentStatusOverview,
    DeploymentStatusTrigger,
    ProxyStatus,
    ReplicaState,
    ServeStatus,
)
from raylite.serve.config import (
    AutoscalingConfig,
    AutoscalingPolicy,
    BackpressureConfig,
    DeploymentActorConfig,
    GangSchedulingConfig,
    LoggingConfig,
    ProxyLimits,
    ProxyLocation,
    RequestRouterConfig,
)
from raylite.serve.context import ReplicaRank

__all__ = ["ApplicationStatus", "ApplicationStatusOverview", "AutoscalingConfig", "AutoscalingPolicy",
           "BackpressureConfig", "DeploymentActorConfig", "DeploymentSchema", "DeploymentStatus",
           "DeploymentStatusOverview", "DeploymentStatusTrigger", "GangSchedulingConfig", "HTTPOptionsSchema",
           "LoggingConfig", "LoggingConfigSchema", "ProxyLocation", "ProxyStatus", "RayActorOptionsSchema",
           "ReplicaRank", "ReplicaState", "RequestRouterConfig", "ServeApplicationSchema", "ServeConfigError",
           "ServeDeploySchema", "ServeStatus", "format_validation_error", "parse_config", "parse_config_file"]

_AUTOSCALING_FIELDS = {
    "min_replicas", "initial_replicas", "max_replicas", "target_ongoing_requests",
    "target_num_ongoing_requests_per_replica", "metrics_interval_s", "look_back_period_s",
    "smoothing_factor", "upscale_smoothing_factor", "downscale_smoothing_factor", "upscaling_factor",
    "downscaling_factor", "downscale_delay_s", "upscale_delay_s", "downscale_to_zero_delay_s",
    "aggregation_function", "policy",
}
_PROXY_LOCATIONS = ("Disabled", "HeadOnly", "EveryNode")
# fields of Ray 2.60's config schemas that raylite refuses (a config must not be half-applied)
_RAY_ONLY = {"controller_options", "tracing_config", "host", "port", "deployment_actors", "ssl_ca_certs",
             "ssl_certfile", "ssl_keyfile", "ssl_keyfile_password", "fallback_strategy"}


class ServeConfigError(ValueError):
    """A Serve config file or dict does not fit the schema; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LoggingConfigSchema(LoggingConfig):
    """Ray's `LoggingConfig` in a config file: the same model as `raylite.serve.config.LoggingConfig`."""


class HTTPOptionsSchema(ProxyLimits, _Strict):
    """Where the HTTP proxies listen (Ray's defaults for config files: 0.0.0.0:8000)."""

    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    root_path: str = ""
    request_timeout_s: float | None = None
    keep_alive_timeout_s: float = 5.0


class RayActorOptionsSchema(_Strict):
    """The actor options a replica may be given in a config file."""

    runtime_env: dict[str, Any] = Field(default_factory=dict)
    num_cpus: float | None = Field(None, ge=0)
    num_gpus: float | None = Field(None, ge=0)
    memory: float | None = Field(None, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)
    accelerator_type: str | None = None
    label_selector: dict[str, str] | None = None


class DeploymentSchema(_Strict):
    """Options of one deployment that override what the code says; only fields set count."""

    name: str
    num_replicas: int | str | None = None
    max_ongoing_requests: int | None = Field(None, gt=0)
    max_queued_requests: int | None = Field(None, ge=-1)
    user_config: Any = None
    autoscaling_config: dict[str, Any] | None = None
    graceful_shutdown_wait_loop_s: float | None = Field(None, ge=0)
    graceful_shutdown_timeout_s: float | None = Field(None, ge=0)
    health_check_period_s: float | None = Field(None, gt=0)
    health_check_timeout_s: float | None = Field(None, gt=0)
    ray_actor_options: RayActorOptionsSchema | None = None
    placement_group_bundles: list[dict[str, float]] | None = None
    placement_group_strategy: str | None = None
    max_replicas_per_node: int | None = Field(None, gt=0)
    logging_config: LoggingConfigSchema | None = None
    request_router_config: dict[str, Any] | None = None
    backpressure_config: dict[str, Any] | None = None
    gang_scheduling_config: dict[str, Any] | None = None
    placement_group_bundle_label_selector: list[dict[str, str]] | None = None
    max_constructor_retry_count: int | None = Field(None, gt=0)
    rolling_update_percentage: float | None = Field(None, gt=0, le=1)
    max_surge_percent: int | None = Field(None, ge=0, le=100)
    max_request_body_size_bytes: int | None = Field(None, ge=0)  # raylite: the proxy's limit for its routes

    @field_validator("num_replicas")
    @classmethod
    def _num_replicas(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, str) and v != "auto":
            raise ValueError(f"must be a non-negative integer or \"auto\", not {v!r}")
        if isinstance(v, int) and v < 0:
            raise ValueError(f"must be >= 0, not {v}")
        return v

    @field_validator("autoscaling_config")
    @classmethod
    def _autoscaling(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - _AUTOSCALING_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; known: {sorted(_AUTOSCALING_FIELDS)}")
        from raylite.serve._internal.autoscaling import resolve_config

        resolve_config(v)  # raises naming the bad field
        return v

    def overrides(self) -> dict[str, Any]:
        """The options this entry sets, as `Deployment.options(**...)` takes them."""
        out: dict[str, Any] = {}
        for key in self.model_fields_set - {"name"}:
            value = getattr(self, key)
            if isinstance(value, BaseModel):
                value = value.model_dump(exclude_unset=True)
            out[key] = value
        return out


class ServeApplicationSchema(_Strict):
    """One application: what to import, where to route it, and deployment overrides."""

    name: str = "default"
    route_prefix: str | None = "/"
    import_path: str
    runtime_env: dict[str, Any] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    deployments: list[DeploymentSchema] = Field(default_factory=list)
    logging_config: LoggingConfigSchema | None = None
    external_scaler_enabled: bool = False
    autoscaling_policy: dict[str, Any] | None = None  # an application-level policy (policy_function, policy_kwargs)

    @field_validator("import_path")
    @classmethod
    def _import_path(cls, v: str) -> str:
        v = v.strip()
        if not v or (":" not in v and "." not in v):
            raise ValueError(f"must look like 'module:attribute' or 'module.attribute', not {v!r}")
        return v

    @field_validator("route_prefix")
    @classmethod
    def _route_prefix(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith("/"):
            raise ValueError(f"must start with '/', not {v!r}")
        if v != "/" and v.endswith("/"):
            raise ValueError(f"must not end with '/' (got {v!r}); use {v.rstrip('/')!r}")
        if "{" in v or "}" in v:
            raise ValueError(f"must not contain wildcards such as '{{'/'}}' (got {v!r})")
        return v

    @model_validator(mode="after")
    def _unique_deployments(self) -> ServeApplicationSchema:
        names = [d.name for d in self.deployments]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"deployment name(s) {dupes} appear more than once in application {self.name!r}")
        return self


class ServeDeploySchema(_Strict):
    """A whole `serve deploy` / `serve run` config file."""

    proxy_location: str = "EveryNode"
    http_options: HTTPOptionsSchema = Field(default_factory=HTTPOptionsSchema)
    grpc_options: dict[str, Any] | None = None
    logging_config: LoggingConfigSchema | None = None
    applications: list[ServeApplicationSchema] = Field(default_factory=list)
    target_capacity: float | None = Field(None, ge=0, le=100)

    @field_validator("proxy_location")
    @classmethod
    def _proxy_location(cls, v: str) -> str:
        for name in _PROXY_LOCATIONS:
            if str(v).replace("_", "").lower() == name.lower():
                return name
        raise ValueError(f"must be one of {list(_PROXY_LOCATIONS)}, not {v!r}")

    @model_validator(mode="after")
    def _unique_apps(self) -> ServeDeploySchema:
        names = [a.name for a in self.applications]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"application name(s) {dupes} appear more than once; each needs its own name")
        prefixes = [a.route_prefix for a in self.applications if a.route_prefix is not None]
        dupes = sorted({p for p in prefixes if prefixes.count(p) > 1})
        if dupes:
            raise ValueError(f"route_prefix(es) {dupes} are used by more than one application")
        return self


def format_validation_error(error: ValidationError, source: str = "config") -> str:
    """pydantic's error list -> `source: applications[0].import_path: <why>` lines."""
    lines = []
    for item in error.errors():
        path = ""
        for part in item.get("loc", ()):
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = item.get("msg", "invalid").removeprefix("Value error, ")
        if item.get("type") == "extra_forbidden":
            last = str((item.get("loc") or ("",))[-1])
            message = (f"Ray's field {last!r}, which raylite does not support yet; remove it" if last in _RAY_ONLY
                       else "unknown field (check its spelling against Ray's ServeDeploySchema)")
        lines.append(f"{source}: {path or '<top level>'}: {message}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "config") -> ServeDeploySchema:
    """Validate a config dict (a single-application dict is accepted as a one-app file)."""
    if not isinstance(data, dict):
        raise ServeConfigError(f"{source}: expected a mapping with an 'applications' list, got "
                               f"{type(data).__name__}")
    if "import_path" in data and "applications" not in data:
        data = {"applications": [data]}
    try:
        return ServeDeploySchema.model_validate(data)
    except ValidationError as e:
        raise ServeConfigError(format_validation_error(e, source)) from None


def parse_config_file(path: str) -> ServeDeploySchema:
    """Read and validate a YAML config file; errors name the file, the line or the field."""
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ServeConfigError(f"config file {path!r} does not exist") from None
    except yaml.YAMLError as e:
        raise ServeConfigError(f"{path}: not valid YAML: {e}") from None
    return parse_config(data, source=path)
