"""The scheduling strategy a task or actor travels with, and its wire form, side by side.

A user's `scheduling_strategy` option (None/"DEFAULT", "SPREAD", or a
NodeAffinitySchedulingStrategy) becomes one `Strategy`; a placement group's strategy does not
live here, it becomes a bundle resource request instead (scheduling.bundle_request). On the
wire (TaskSpec.strategy, RequestLease, PickNode) a strategy is a short list, so a spec stays
plain msgpack:

    []                          DEFAULT: the local node if it has room, else the one with most
    ["SPREAD"]                  SPREAD: round-robin over the nodes with room
    ["NODE", node_id_hex, soft] node affinity; soft falls back to DEFAULT
    ["LABELS", selectors, ...]  label selectors with their fallbacks (labels.py reads the rest)

Only this module takes that list apart: everything else calls `decode` and reads the fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["DEFAULT", "SPREAD", "NODE", "LABELS"]
_KINDS: Final = ("DEFAULT", "SPREAD", "NODE", "LABELS")


@dataclass(frozen=True, slots=True)
class Strategy:
    """Where a task may run. `node_id_hex` and `soft` mean something for NODE only; `labels`
    (the wire list as it came, which labels.py takes apart) for LABELS only."""

    kind: Kind = "DEFAULT"
    node_id_hex: str = ""
    soft: bool = False
    labels: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown scheduling strategy kind {self.kind!r}: use one of {_KINDS}")

    @classmethod
    def node(cls, node_id_hex: str, soft: bool) -> Strategy:
        """Node affinity: run on `node_id_hex`; with `soft`, anywhere when that node cannot."""
        return cls("NODE", node_id_hex, bool(soft))

    @property
    def is_default(self) -> bool:
        return self.kind == "DEFAULT"

    @property
    def is_spread(self) -> bool:
        return self.kind == "SPREAD"

    @property
    def is_node(self) -> bool:
        return self.kind == "NODE"

    @property
    def is_labels(self) -> bool:
        return self.kind == "LABELS"

    @property
    def node_id(self) -> bytes:
        """The pinned node's id as bytes (NODE only)."""
        return bytes.fromhex(self.node_id_hex)

    def to_wire(self) -> list[str | bool]:
        if self.kind == "DEFAULT":
            return []
        if self.kind == "SPREAD":
            return ["SPREAD"]
        if self.kind == "LABELS":
            return list(self.labels)  # type: ignore[arg-type]
        return ["NODE", self.node_id_hex, self.soft]


DEFAULT: Final = Strategy()
SPREAD: Final = Strategy("SPREAD")


def decode(wire: Strategy | Sequence[object] | None) -> Strategy:
    """The Strategy a wire list (or an already decoded Strategy, or None) stands for."""
    if isinstance(wire, Strategy):
        return wire
    if not wire:
        return DEFAULT
    kind = wire[0]
    if kind == "SPREAD":
        return SPREAD
    if kind == "LABELS" and len(wire) >= 2:
        return Strategy("LABELS", labels=tuple(wire))
    if kind == "NODE" and len(wire) >= 2 and isinstance(wire[1], str):
        return Strategy("NODE", wire[1], bool(wire[2]) if len(wire) > 2 else False)
    raise ValueError(f"malformed scheduling strategy on the wire: {list(wire)!r} "
                     "(expected [], ['SPREAD'], ['NODE', node_id_hex, soft] or ['LABELS', selectors, ...])")
