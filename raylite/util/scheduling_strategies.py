"""Scheduling strategies, passed as `.options(scheduling_strategy=...)`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_SCHEDULING_STRATEGY = "DEFAULT"
SPREAD_SCHEDULING_STRATEGY = "SPREAD"


@dataclass
class PlacementGroupSchedulingStrategy:
    """Run in a placement group's bundle (`placement_group_bundle_index=-1`: any bundle)."""

    placement_group: Any
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None


@dataclass
class NodeAffinitySchedulingStrategy:
    """Run on the node with this id (hex); `soft=True` falls back to any node."""

    node_id: str
    soft: bool
    _spill_on_unavailable: bool = False
    _fail_on_unavailable: bool = False


@dataclass
class NodeLabelSchedulingStrategy:
    hard: dict
    soft: dict | None = None


__all__ = ["DEFAULT_SCHEDULING_STRATEGY", "NodeAffinitySchedulingStrategy", "NodeLabelSchedulingStrategy",
           "PlacementGroupSchedulingStrategy", "SPREAD_SCHEDULING_STRATEGY"]
