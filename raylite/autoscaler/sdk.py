"""`request_resources`: ask the autoscaler for capacity ahead of the tasks that will need it.

Ray's `ray.autoscaler.sdk.request_resources` (Daft's Ray runner calls it before starting its
workers, and with `bundles=[]` to withdraw the request). As in Ray, the request replaces the
previous one and is stored in the cluster's key-value store, where an autoscaler reads it; a
cluster without an autoscaler keeps it and goes on with the nodes it has, so the call never
blocks or fails for lack of capacity.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

from raylite.experimental import internal_kv

KV_NAMESPACE = "autoscaler"
KV_KEY = "resource_request"


def _check_bundles(bundles: Any) -> list[dict[str, float]]:
    if not isinstance(bundles, list):
        raise TypeError(f"request_resources(bundles={bundles!r}): give a list of dicts such as [{{'CPU': 1}}]")
    for bundle in bundles:
        if not isinstance(bundle, dict) or not all(
                isinstance(k, str) and isinstance(v, numbers.Real) and v >= 0 for k, v in bundle.items()):
            raise TypeError(f"request_resources: bundle {bundle!r} must map resource names to numbers >= 0, "
                            "e.g. {'CPU': 2, 'GPU': 1}")
    return [{k: float(v) for k, v in b.items()} for b in bundles]


def request_resources(num_cpus: int | None = None, bundles: list[dict[str, float]] | None = None) -> None:
    """Ask for `num_cpus` CPUs and/or room for `bundles` in total (not in addition to what runs).

    Each call replaces the previous request; `request_resources(bundles=[])` (or `num_cpus=0`)
    withdraws it. Needs a connected driver or worker.
    """
    if num_cpus is not None and (not isinstance(num_cpus, int) or num_cpus < 0):
        raise TypeError(f"request_resources(num_cpus={num_cpus!r}): give an int >= 0")
    request = {"num_cpus": num_cpus or 0, "bundles": _check_bundles(bundles if bundles is not None else [])}
    if not internal_kv._internal_kv_initialized():
        raise RuntimeError("request_resources() needs a cluster: call ray.init() first")
    internal_kv._internal_kv_put(KV_KEY, json.dumps(request), namespace=KV_NAMESPACE)


def current_request() -> dict[str, Any]:
    """The standing request ({'num_cpus': 0, 'bundles': []} when none), as an autoscaler reads it."""
    raw = internal_kv._internal_kv_get(KV_KEY, namespace=KV_NAMESPACE)
    return json.loads(raw) if raw else {"num_cpus": 0, "bundles": []}


__all__ = ["current_request", "request_resources"]
