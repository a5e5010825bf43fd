"""raylite's cluster autoscaler (Ray's `ray.autoscaler`): a pure policy (policy.py) over a
`NodeProvider` (providers/kuberay.py for KubeRay's RayCluster, providers/local.py for hosts it
starts node daemons on), driven by `Autoscaler` (autoscaler.py), and `sdk.request_resources`.

Uses only the public raylite API (L7): the head's demand comes from
`raylite.util.state.get_cluster_demand`, and its view goes back through
`raylite.util.state.publish_autoscaler_view`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["sdk"]


def __getattr__(name: str) -> Any:
    if name == "sdk":
        return importlib.import_module("raylite.autoscaler.sdk")
    raise AttributeError(f"module 'raylite.autoscaler' has no attribute {name!r}")
