"""`raylite.autoscaler.sdk.request_resources` (Ray's `ray.autoscaler.sdk.request_resources`).

    raylite.autoscaler.sdk.request_resources(num_cpus=8)                  # room for 8 CPUs
    raylite.autoscaler.sdk.request_resources(bundles=[{"GPU": 1}] * 2)    # two 1-GPU slots
    raylite.autoscaler.sdk.request_resources()                            # drop the request

The request is a standing floor, kept in the head's KV store: the autoscaler sizes the cluster so
that its totals could hold all of it at once, whatever is running, until the next call replaces
it. It asks for capacity only; nothing is reserved and no task waits for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from raylite._state import request_resources_row


def request_resources(num_cpus: int | None = None,
                      bundles: Sequence[Mapping[str, float]] | None = None) -> None:
    """Ask the autoscaler to scale to hold `num_cpus` one-CPU slots plus `bundles`, replacing
    the previous request (a call with neither clears it). Needs `raylite.init()` first."""
    if num_cpus is not None and (not isinstance(num_cpus, int) or isinstance(num_cpus, bool) or num_cpus < 0):
        raise TypeError(f"request_resources(num_cpus=...) takes a whole number >= 0, not {num_cpus!r}")
    wanted: list[dict[str, float]] = [{"CPU": 1.0}] * (num_cpus or 0)
    for b in bundles or []:
        if not isinstance(b, Mapping) or not all(isinstance(v, (int, float)) and v >= 0 for v in b.values()):
            raise TypeError(f"request_resources(bundles=...) takes dicts of resource name -> amount >= 0, "
                            f"not {b!r}")
        wanted.append({str(k): float(v) for k, v in b.items() if v})
    request_resources_row(json.dumps({"bundles": wanted}).encode() if wanted else b"")


__all__ = ["request_resources"]
