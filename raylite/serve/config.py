"""Serve's configuration models under Ray's names and field names (`ray.serve.config`).

Pydantic models, so a config file or a dict validates with a message naming the bad field.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from raylite.serve._internal.common import (
    AutoscalingContext,
    DeploymentID,
    ReplicaID,
    TimeSeries,
    TimeStampedValue,
)
from raylite.serve._internal.http_limits import Limits


class ProxyLocation(str, Enum):
    """Where HTTP proxies run: on every node (default), on the head only, or nowhere."""

    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"

    @classmethod
    def parse(cls, value: Any) -> ProxyLocation:
        if isinstance(value, ProxyLocation):
            return value
        for member in cls:
            if str(value).lower() in (member.value.lower(), member.name.lower()):
                return member
        aliases = {"nodisabled": cls.Disabled, "headonly": cls.HeadOnly, "everynode": cls.EveryNode}
        if str(value).replace("_", "").lower() in aliases:
            return aliases[str(value).replace("_", "").lower()]
        raise ValueError(f"proxy_location must be one of {[m.value for m in cls]}, not {value!r}")


class AggregationFunction(str, Enum):
    """How samples over the look-back window are reduced to one number."""

    MEAN = "mean"
    MAX = "max"
    MIN = "min"


class AutoscalingPolicy(BaseModel):
    """A custom autoscaling policy: `policy_function` is a function of an `AutoscalingContext`
    returning `(replicas, policy_state)`, or a class (built once with `policy_kwargs`) whose
    instances are called so. Give it as an import path (`"my_module:my_policy"`) or the object;
    it is pickled with its module's code here, so the Serve controller need not import it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    policy_function: str | Callable = "ray.serve.autoscaling_policy:default_autoscaling_policy"
    policy_kwargs: dict[str, Any] = Field(default_factory=dict)
    _serialized_policy: bytes = PrivateAttr(default=b"")

    @model_validator(mode="before")
    @classmethod
    def _legacy_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "name" in data and "policy_function" not in data:
            data = {**data, "policy_function": data["name"]}  # the field's name before Ray 2.50
            data.pop("name")
        return data

    def model_post_init(self, __context: Any) -> None:
        from raylite.serve._internal.options import autoscaling_policy

        resolved = autoscaling_policy({"policy_function": self.policy_function, "policy_kwargs": self.policy_kwargs})
        self.policy_function = resolved["policy_function"]
        self._serialized_policy = resolved.get("serialized_policy", b"")

    def is_default_policy_function(self) -> bool:
        return not self._serialized_policy

    def get_policy(self) -> Any:
        """The policy object (function or class) this config names."""
        import cloudpickle

        from raylite.serve._internal.options import _import_attr

        if self._serialized_policy:
            return cloudpickle.loads(self._serialized_policy)
        if self.policy_function.startswith("ray.serve.autoscaling_policy:"):
            from raylite.serve import autoscaling_policy

            return getattr(autoscaling_policy, self.policy_function.rsplit(":", 1)[1])
        return _import_attr(self.policy_function, "policy_function")


class AutoscalingConfig(BaseModel):
    """Request-based autoscaling: keep about `target_ongoing_requests` per replica (or run a
    custom `policy`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    min_replicas: int = Field(1, ge=0)
    initial_replicas: int | None = Field(None, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)
    metrics_interval_s: float = Field(10.0, gt=0)
    look_back_period_s: float = Field(30.0, gt=0)
    smoothing_factor: float = Field(1.0, gt=0)
    upscale_smoothing_factor: float | None = None
    downscale_smoothing_factor: float | None = None
    upscaling_factor: float | None = None
    downscaling_factor: float | None = None
    downscale_delay_s: float = Field(600.0, ge=0)
    downscale_to_zero_delay_s: float | None = Field(None, ge=0)
    upscale_delay_s: float = Field(30.0, ge=0)
    aggregation_function: str = "mean"
    policy: AutoscalingPolicy | None = None

    @field_validator("aggregation_function", mode="before")
    @classmethod
    def _check_aggregation(cls, v: Any) -> str:
        v = str(getattr(v, "value", v)).lower()
        if v not in ("mean", "max", "min"):
            raise ValueError(f"aggregation_function must be 'mean', 'max' or 'min', not {v!r}")
        return v

    def get_upscaling_factor(self) -> float:
        return self.upscaling_factor or self.upscale_smoothing_factor or self.smoothing_factor

    def get_downscaling_factor(self) -> float:
        return self.downscaling_factor or self.downscale_smoothing_factor or self.smoothing_factor

    def get_target_ongoing_requests(self) -> float:
        return self.target_ongoing_requests

    @model_validator(mode="after")
    def _check_bounds(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must not exceed max_replicas "
                             f"({self.max_replicas})")
        if self.initial_replicas is not None and not (
                self.min_replicas <= self.initial_replicas <= self.max_replicas):
            raise ValueError(f"initial_replicas ({self.initial_replicas}) must lie between "
                             f"min_replicas ({self.min_replicas}) and max_replicas ({self.max_replicas})")
        return self

    @classmethod
    def default(cls) -> AutoscalingConfig:
        """What `num_replicas="auto"` means (as in Ray 2.x)."""
        return cls(min_replicas=1, max_replicas=100, target_ongoing_requests=2.0)


class LoggingConfig(BaseModel):
    """Replica logging: line encoding, level, and one access-log line per request."""

    model_config = ConfigDict(extra="forbid")

    encoding: str = "TEXT"
    log_level: str | int = "INFO"
    logs_dir: str | None = None
    enable_access_log: bool = True
    additional_log_standard_attrs: list[str] = Field(default_factory=list)

    @field_validator("encoding")
    @classmethod
    def _check_encoding(cls, v: str) -> str:
        if v.upper() not in ("TEXT", "JSON"):
            raise ValueError(f"encoding must be 'TEXT' or 'JSON', not {v!r}")
        return v.upper()

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, v: str | int) -> str | int:
        if isinstance(v, str) and v.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {v!r}")
        return v.upper() if isinstance(v, str) else v


class ProxyLimits(BaseModel):
    """raylite's limits on what a client may send to the proxy (431 / 413 / 408 beyond them):
    `http_options` fields of both HTTPOptions and a config file's HTTPOptionsSchema, with the
    defaults of the proxy's own `http_limits.Limits`."""

    max_header_size_bytes: int = Field(Limits.max_header_size_bytes, ge=1)
    max_header_count: int = Field(Limits.max_header_count, ge=1)
    max_request_body_size_bytes: int = Field(Limits.max_request_body_size_bytes, ge=1)
    header_read_timeout_s: float = Field(Limits.header_read_timeout_s, gt=0)
    body_read_timeout_s: float = Field(Limits.body_read_timeout_s, gt=0)
    max_connections: int = Field(Limits.max_connections, ge=1)
    max_buffered_request_body_bytes: int = Field(Limits.max_buffered_request_body_bytes, ge=1)  # all bodies together


class HTTPOptions(ProxyLimits):
    """The HTTP proxies' options (`serve.start(http_options=...)`)."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    middlewares: list[Any] = Field(default_factory=list)
    location: ProxyLocation | None = ProxyLocation.EveryNode
    num_cpus: float = 0
    root_path: str = ""
    request_timeout_s: float | None = None
    keep_alive_timeout_s: float = 5.0


class gRPCOptions(BaseModel):  # noqa: N801 - Ray's name
    """Accepted for API compatibility; raylite serves HTTP only."""

    port: int = 9000
    grpc_servicer_functions: list[str] = Field(default_factory=list)


class BackpressureConfig(BaseModel):
    """The HTTP answer to a request shed because `max_queued_requests` are already waiting:
    503 (default) or 429, with a `Retry-After` header of `retry_after_s` (rounded up) when set.
    A deployment that is unavailable (failed, deleted) still answers 503."""

    model_config = ConfigDict(extra="forbid")

    status_code: Literal[503, 429] = 503
    retry_after_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class GangPlacementStrategy(str, Enum):
    """Where a gang's replicas go: PACK (few nodes, best effort) or SPREAD (distinct nodes, best effort)."""

    PACK = "PACK"
    SPREAD = "SPREAD"


class GangRuntimeFailurePolicy(str, Enum):
    """What happens when a replica of a running gang fails."""

    RESTART_GANG = "RESTART_GANG"
    RESTART_REPLICA = "RESTART_REPLICA"


class GangSchedulingConfig(BaseModel):
    """Replicas start, stop and are placed in gangs of `gang_size` (one placement group per gang);
    `num_replicas` must be a multiple of `gang_size`. With RESTART_GANG, a failed replica takes its
    whole gang down and the gang is started again together."""

    model_config = ConfigDict(extra="forbid")

    gang_size: int = Field(ge=1)
    gang_placement_strategy: GangPlacementStrategy = GangPlacementStrategy.PACK
    runtime_failure_policy: GangRuntimeFailurePolicy = GangRuntimeFailurePolicy.RESTART_GANG

    @field_validator("runtime_failure_policy")
    @classmethod
    def _only_restart_gang(cls, v: GangRuntimeFailurePolicy) -> GangRuntimeFailurePolicy:
        if v == GangRuntimeFailurePolicy.RESTART_REPLICA:
            raise NotImplementedError("RESTART_REPLICA is not implemented (nor in Ray 2.60); use RESTART_GANG")
        return v


class DeploymentActorConfig(BaseModel):
    """An actor that belongs to a deployment: started by the Serve controller before the
    deployment's replicas, shared by all of them (`serve.get_deployment_actor(name)`), health
    checked and replaced when it dies, and stopped when the deployment is deleted."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    actor_class: Any
    init_args: tuple = Field(default_factory=tuple)
    init_kwargs: dict[str, Any] = Field(default_factory=dict)
    actor_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("init_args", mode="before")
    @classmethod
    def _to_tuple(cls, v: Any) -> tuple:
        return tuple(v) if v else ()


class RequestRouterConfig(BaseModel):
    """Accepted for compatibility; raylite routes with power-of-two-choices on queue lengths."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    request_router_class: str | Callable = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
    request_router_kwargs: dict[str, Any] = Field(default_factory=dict)
    request_routing_stats_period_s: float = Field(10.0, gt=0)
    request_routing_stats_timeout_s: float = Field(30.0, gt=0)


class DeploymentConfig(BaseModel):
    """The per-deployment settings that can change without restarting replicas' code."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    num_replicas: int | None = Field(1, ge=0)
    max_ongoing_requests: int = Field(5, gt=0)
    max_queued_requests: int = Field(-1, ge=-1)
    user_config: Any = None
    graceful_shutdown_wait_loop_s: float = Field(2.0, ge=0)
    graceful_shutdown_timeout_s: float = Field(20.0, ge=0)
    health_check_period_s: float = Field(10.0, gt=0)
    health_check_timeout_s: float = Field(30.0, gt=0)
    autoscaling_config: AutoscalingConfig | None = None
    logging_config: LoggingConfig | None = None
    backpressure_config: BackpressureConfig | None = None
    gang_scheduling_config: GangSchedulingConfig | None = None
    max_constructor_retry_count: int = Field(20, gt=0)
    rolling_update_percentage: float = Field(0.2, gt=0, le=1)
    max_surge_percent: int = Field(0, ge=0, le=100)
    max_request_body_size_bytes: int | None = Field(None, ge=0)  # raylite: the proxy's limit for its routes


__all__ = ["AggregationFunction", "AutoscalingConfig", "AutoscalingContext", "AutoscalingPolicy",
           "BackpressureConfig", "DeploymentActorConfig", "DeploymentConfig", "DeploymentID",
           "GangPlacementStrategy", "GangRuntimeFailurePolicy", "GangSchedulingConfig", "HTTPOptions",
           "LoggingConfig", "ProxyLocation", "ReplicaID", "RequestRouterConfig", "TimeSeries", "TimeStampedValue",
           "gRPCOptions"]
