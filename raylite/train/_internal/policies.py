"""Pure decisions of the controller: retry or give up, and whether a group can ever fit.

Examples:
    FailurePolicy(FailureConfig(max_failures=2)): failure 1 -> RESTART, 2 -> RESTART,
    3 -> RAISE. max_failures=-1 restarts forever; 0 raises at the first failure.

    max_workers_that_fit({"CPU": 1}, "PACK", [{"CPU": 2}, {"CPU": 3}]) == 5
    max_workers_that_fit({"CPU": 1}, "STRICT_PACK", [{"CPU": 2}, {"CPU": 3}]) == 3
    max_workers_that_fit({"CPU": 1}, "STRICT_SPREAD", [{"CPU": 2}, {"CPU": 3}]) == 2
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from raylite.train.config import FailureConfig


class FailureAction(enum.Enum):
    RESTART = "RESTART"
    RAISE = "RAISE"


@dataclass(frozen=True)
class FailureDecision:
    action: FailureAction
    failures: int  # failures so far, this one included
    reason: str


class FailurePolicy:
    """Restart the whole group until ``max_failures`` restarts have been used."""

    def __init__(self, config: FailureConfig) -> None:
        self._max = config.max_failures

    def decide(self, failures: int) -> FailureDecision:
        if self._max == -1 or failures <= self._max:
            limit = "unlimited" if self._max == -1 else str(self._max)
            return FailureDecision(
                FailureAction.RESTART, failures, f"restart {failures} of {limit}"
            )
        return FailureDecision(
            FailureAction.RAISE,
            failures,
            f"FailureConfig(max_failures={self._max}) used up after {failures} failure(s)",
        )


def _fits_n(per_worker: Mapping[str, float], capacity: Mapping[str, float]) -> int:
    """How many identical bundles one node holds."""
    counts = []
    for name, need in per_worker.items():
        if need <= 0:
            continue
        have = capacity.get(name, 0.0)
        counts.append(int(math.floor(have / need + 1e-9)))
    return min(counts) if counts else 10**9


def max_workers_that_fit(
    per_worker: Mapping[str, float], strategy: str, nodes: Sequence[Mapping[str, float]]
) -> int:
    """The most workers of this shape the cluster could hold, if it were idle."""
    per_node = [_fits_n(per_worker, cap) for cap in nodes]
    if not per_node:
        return 0
    if strategy == "STRICT_PACK":
        return max(per_node)
    if strategy == "STRICT_SPREAD":
        return sum(1 for n in per_node if n >= 1)
    return sum(per_node)


def infeasible_message(
    trainer: str,
    num_workers: int,
    per_worker: Mapping[str, float],
    strategy: str,
    nodes: Sequence[Mapping[str, float]],
) -> str | None:
    """None when the group fits the cluster; else a message naming request and capacity."""
    fit = max_workers_that_fit(per_worker, strategy, nodes)
    if fit >= num_workers:
        return None
    total = {k: v * num_workers for k, v in per_worker.items()}
    capacity: dict[str, float] = {}
    for cap in nodes:
        for k, v in cap.items():
            if k in per_worker:
                capacity[k] = capacity.get(k, 0.0) + v
    hint = "Lower ScalingConfig(num_workers=...) or resources_per_worker"
    if per_worker.get("GPU", 0) > 0 and capacity.get("GPU", 0) == 0:
        hint = "This cluster has no GPUs: set ScalingConfig(use_gpu=False)"
    return (
        f"{trainer} asked for {num_workers} workers x {_fmt(per_worker)} = {_fmt(total)} "
        f"(placement_strategy={strategy}), but this cluster can hold at most {fit} such "
        f"worker(s): {len(nodes)} node(s) with {_fmt(capacity)} in total. {hint}, "
        "or start a larger cluster (raylite.init(num_cpus=...) or more nodes)."
    )


def _fmt(res: Mapping[str, float]) -> str:
    parts = [f"{k}: {v:g}" for k, v in sorted(res.items())]
    return "{" + ", ".join(parts) + "}"
