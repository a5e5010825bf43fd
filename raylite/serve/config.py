"""Serve's configuration models under Ray's names and field names (`ray.serve.config`).

Pydantic models, so a config file or a dict validates with a message naming the bad field.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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


class AutoscalingConfig(BaseModel):
    """Request-based autoscaling: keep about `target_ongoing_requests` per replica."""

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
    upscale_delay_s: float = Field(30.0, ge=0)
    aggregation_function: str = "mean"

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


class HTTPOptions(BaseModel):
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
    # raylite: limits on what a client may send to the proxy (431 / 413 / 408 beyond them)
    max_header_size_bytes: int = Field(16 * 1024, ge=1)
    max_header_count: int = Field(100, ge=1)
    max_request_body_size_bytes: int = Field(100 * 1024**2, ge=1)
    header_read_timeout_s: float = Field(30.0, gt=0)
    body_read_timeout_s: float = Field(30.0, gt=0)
    max_connections: int = Field(10_000, ge=1)


class gRPCOptions(BaseModel):  # noqa: N801 - Ray's name
    """Accepted for API compatibility; raylite serves HTTP only."""

    port: int = 9000
    grpc_servicer_functions: list[str] = Field(default_factory=list)


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
    max_request_body_size_bytes: int | None = Field(None, ge=0)  # raylite: the proxy's limit for its routes


__all__ = ["AutoscalingConfig", "DeploymentConfig", "HTTPOptions", "LoggingConfig", "ProxyLocation",
           "gRPCOptions"]
