"""The logical plan: what the user asked for, as a DAG of immutable-ish nodes.

Each Dataset method appends one node; nothing runs until a consumer asks for
data. The planner (``planner.py``) turns this DAG into physical operators,
fusing chains of map-like nodes into single tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raylite.data._internal.transforms import Stage
from raylite.data.block import Block, BlockMetadata


def _post_order(root: Any, children: Callable[[Any], list[Any]]) -> list[Any]:
    seen: set[int] = set()
    out: list[Any] = []
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(children(node)):
            if id(child) not in seen:
                stack.append((child, False))
    return out


@dataclass(frozen=True)
class ActorPoolStrategy:
    """Run a map with a pool of actors (Ray's ``ActorPoolStrategy``): ``size`` or ``min_size..max_size``."""

    size: int | None = None
    min_size: int | None = None
    max_size: int | None = None
    max_tasks_in_flight_per_actor: int = 2

    def bounds(self) -> tuple[int, int]:
        if self.size is not None:
            return self.size, self.size
        lo = self.min_size or 1
        hi = self.max_size or max(lo, 1)
        if lo > hi:
            raise ValueError(f"ActorPoolStrategy min_size={lo} is larger than max_size={hi}")
        return lo, hi


@dataclass(frozen=True)
class TaskPoolStrategy:
    """Run a map as stateless tasks (the default); ``size`` caps concurrent tasks."""

    size: int | None = None


@dataclass(eq=False)
class LogicalOperator:
    name: str
    inputs: list[LogicalOperator] = field(default_factory=list)

    def post_order(self) -> list[LogicalOperator]:
        """This node's DAG, inputs before consumers (iterative: no self-referencing closure)."""
        return _post_order(self, lambda op: op.inputs)

    def known_num_rows(self) -> int | None:
        """Rows this node outputs if known without running anything."""
        return None


@dataclass(eq=False)
class Read(LogicalOperator):
    datasource: Any = None
    parallelism: int = -1
    ray_remote_args: dict[str, Any] = field(default_factory=dict)

    def known_num_rows(self) -> int | None:
        return self.datasource.num_rows()


@dataclass(eq=False)
class InputData(LogicalOperator):
    """Data that already exists: driver-side blocks (from_*) or refs (a materialized dataset)."""

    blocks: list[Block] | None = None
    bundles: list[Any] | None = None  # list[RefBundle]

    def known_num_rows(self) -> int | None:
        if self.blocks is not None:
            return sum(b.num_rows for b in self.blocks)
        metas: list[BlockMetadata] = [m for b in self.bundles or [] for _, m in b.blocks]
        if any(m.num_rows is None for m in metas):
            return None
        return sum(m.num_rows or 0 for m in metas)


@dataclass(eq=False)
class MapLike(LogicalOperator):
    """Any one-to-one block transform: map, map_batches, filter, flat_map, projections, writes."""

    stage: Stage | None = None
    compute: Any = None  # TaskPoolStrategy | ActorPoolStrategy
    ray_remote_args: dict[str, Any] = field(default_factory=dict)
    min_rows_per_bundle: int | None = None
    preserves_rows: bool = False  # True when the row count does not change (projections)

    def known_num_rows(self) -> int | None:
        return self.inputs[0].known_num_rows() if self.preserves_rows else None


@dataclass(eq=False)
class Limit(LogicalOperator):
    limit: int = 0

    def known_num_rows(self) -> int | None:
        n = self.inputs[0].known_num_rows()
        return None if n is None else min(n, self.limit)


@dataclass(eq=False)
class AllToAll(LogicalOperator):
    """A barrier: all input blocks are needed before any output (shuffle, sort, aggregate, repartition).

    ``bulk_fn(bundles, ctx) -> bundles`` does the work with tasks submitted
    through the execution's submitter.
    """

    bulk_fn: Callable[..., Any] | None = None
    preserves_rows: bool = True

    def known_num_rows(self) -> int | None:
        return self.inputs[0].known_num_rows() if self.preserves_rows else None


@dataclass(eq=False)
class Union(LogicalOperator):
    def known_num_rows(self) -> int | None:
        counts = [i.known_num_rows() for i in self.inputs]
        return None if any(c is None for c in counts) else sum(counts)  # type: ignore[misc]


@dataclass(eq=False)
class Zip(LogicalOperator):
    def known_num_rows(self) -> int | None:
        return self.inputs[0].known_num_rows()


@dataclass(eq=False)
class Join(LogicalOperator):
    """``left.join(right, ...)``: inputs are [left, right]; ``spec`` is a ``join.JoinSpec``."""

    spec: Any = None
