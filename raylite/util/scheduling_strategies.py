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


def _check_operator_values(values: tuple, operator: str) -> None:
    if not values:
        raise ValueError(f'The variadic parameter of the {operator} operator must be a non-empty tuple: '
                         f'e.g. {operator}("value1", "value2").')
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"Type of value in position {index} for the {operator} operator must be str "
                             f'(e.g. {operator}("value1", "value2")) but got {value!s} of type {type(value)}.')


class In:
    """The node's label is one of `values`."""

    def __init__(self, *values: str) -> None:
        _check_operator_values(values, "In")
        self.values = list(values)


class NotIn:
    """The node has no such label, or its value is none of `values`."""

    def __init__(self, *values: str) -> None:
        _check_operator_values(values, "NotIn")
        self.values = list(values)


class Exists:
    """The node has the label, whatever its value."""


class DoesNotExist:
    """The node does not have the label."""


_OPERATORS = (In, NotIn, Exists, DoesNotExist)


class _LabelMatchExpression:
    """One `key: operator` pair of a NodeLabelSchedulingStrategy."""

    def __init__(self, key: str, operator: Any) -> None:
        self.key = key
        self.operator = operator

    def to_wire(self) -> list:
        op = self.operator
        if isinstance(op, In):
            return [self.key, "in", list(op.values)]
        if isinstance(op, NotIn):
            return [self.key, "!in", list(op.values)]
        return [self.key, "exists" if isinstance(op, Exists) else "!exists", []]


def _expressions(mapping: Any, param: str) -> list[_LabelMatchExpression]:
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise ValueError(f'The {param} parameter must be a map (e.g. {{"key1": In("value1")}}) but got '
                         f"type {type(mapping)}.")
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"The map key of the {param} parameter must be of type str (e.g. "
                             f'{{"key1": In("value1")}}) but got {key!s} of type {type(key)}.')
        if not isinstance(value, _OPERATORS):
            raise ValueError(f"The map value for key {key} of the {param} parameter must be one of the `In`, "
                             f'`NotIn`, `Exists` or `DoesNotExist` operator (e.g. {{"key1": In("value1")}}) '
                             f"but got {value!s} of type {type(value)}.")
        out.append(_LabelMatchExpression(key, value))
    return out


class NodeLabelSchedulingStrategy:
    """Run on a node whose labels match `hard`; among those, prefer nodes that match `soft`.

        NodeLabelSchedulingStrategy({"region": In("us"), "gpu_type": Exists()})
    """

    def __init__(self, hard: dict | None, *, soft: dict | None = None) -> None:
        self.hard = _expressions(hard, "hard")
        self.soft = _expressions(soft, "soft")
        if not (self.hard or self.soft):
            raise ValueError("The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot both be empty.")


__all__ = ["DEFAULT_SCHEDULING_STRATEGY", "DoesNotExist", "Exists", "In", "NodeAffinitySchedulingStrategy",
           "NodeLabelSchedulingStrategy", "NotIn", "PlacementGroupSchedulingStrategy", "SPREAD_SCHEDULING_STRATEGY"]
