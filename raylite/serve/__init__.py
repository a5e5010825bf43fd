"""raylite.serve: Ray Serve's public API (deployments, handles, HTTP) on raylite's Core.

    from raylite import serve

    @serve.deployment(num_replicas=2)
    class Echo:
        async def __call__(self, request):
            return {"path": request.url.path}

    serve.run(Echo.bind())          # http://127.0.0.1:8000/
"""

from raylite.serve.api import (
                               delete,
                               get_app_handle,
                               get_deployment_handle,
                               get_replica_context,
                               run,
                               shutdown,
                               start,
                               status,
)
from raylite.serve.batching import batch
from raylite.serve.config import (
                               AutoscalingConfig,
                               HTTPOptions,
                               LoggingConfig,
                               ProxyLocation,
                               gRPCOptions,
)
from raylite.serve.deployment import Application, Deployment, deployment, ingress
from raylite.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from raylite.serve.multiplex import get_multiplexed_model_id, multiplexed

__all__ = [
    "Application", "AutoscalingConfig", "Deployment", "DeploymentHandle", "DeploymentResponse",
    "DeploymentResponseGenerator", "HTTPOptions", "LoggingConfig", "ProxyLocation", "batch", "delete", "deployment",
    "gRPCOptions", "get_app_handle", "get_deployment_handle", "get_multiplexed_model_id", "get_replica_context",
    "ingress", "multiplexed", "run", "shutdown", "start", "status",
]
