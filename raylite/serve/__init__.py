"""raylite.serve: Ray Serve's public API (deployments, handles, HTTP) on raylite's Core.

    from raylite import serve

    @serve.deployment(num_replicas=2)
    class Echo:
        async def __call__(self, request):
            return {"path": request.url.path}

    serve.run(Echo.bind())          # http://127.0.0.1:8000/
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use (PEP 562), so replica, proxy and controller processes that import one
# internal module do not pay for pydantic and the whole facade.
_NAMES = {
    "delete": "api", "get_app_handle": "api", "get_deployment_actor": "api", "get_deployment_handle": "api",
    "get_replica_context": "api",
    "run": "api", "shutdown": "api", "start": "api", "status": "api",
    "batch": "batching",
    "AutoscalingConfig": "config", "HTTPOptions": "config", "LoggingConfig": "config", "ProxyLocation": "config",
    "gRPCOptions": "config",
    "Application": "application", "Deployment": "application", "deployment": "application", "ingress": "application",
    "DeploymentHandle": "handle", "DeploymentResponse": "handle", "DeploymentResponseGenerator": "handle",
    "get_multiplexed_model_id": "multiplex", "multiplexed": "multiplex",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'raylite.serve' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"raylite.serve.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
