"""Ray's status shapes (`ray.serve.schema.ServeStatus` and friends) as dataclasses."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DeploymentStatusOverview:
    status: str
    status_trigger: str
    replica_states: dict[str, int]
    message: str = ""
    name: str = ""


@dataclass
class ApplicationStatusOverview:
    status: str
    message: str
    last_deployed_time_s: float
    deployments: dict[str, DeploymentStatusOverview]
    name: str = ""
    route_prefix: str | None = None


@dataclass
class ProxyStatusOverview:
    status: str


@dataclass
class ServeStatus:
    proxies: dict[str, str] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ServeStatus:
        apps = {}
        for name, a in d.get("applications", {}).items():
            deps = {dn: DeploymentStatusOverview(**dd) for dn, dd in a.get("deployments", {}).items()}
            apps[name] = ApplicationStatusOverview(status=a["status"], message=a.get("message", ""),
                                                   last_deployed_time_s=a.get("last_deployed_time_s", 0.0),
                                                   deployments=deps, name=name,
                                                   route_prefix=a.get("route_prefix"))
        return cls(proxies=dict(d.get("proxies", {})), applications=apps, target_capacity=d.get("target_capacity"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
