"""Which checkpoints a run keeps: top-k by score, or the most recent k (pure).

The manager only decides; the controller deletes what it evicts from storage. Example:
num_to_keep=2, score "loss" (min); registered losses 0.9, 0.5, 0.7, 0.3 -> after the
third the 0.9 one is evicted, after the fourth the 0.7 one: 0.5 and 0.3 remain.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from raylite.train.config import CheckpointConfig


@dataclass(frozen=True)
class TrackedCheckpoint:
    """A checkpoint the run has committed: its folder and the metrics reported with it."""

    index: int
    dir_name: str
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "dir_name": self.dir_name, "metrics": self.metrics}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrackedCheckpoint:
        return cls(int(d["index"]), str(d["dir_name"]), dict(d.get("metrics") or {}))


class CheckpointManager:
    """Keeps at most ``num_to_keep`` checkpoints, ranked by score or recency."""

    def __init__(
        self, config: CheckpointConfig, tracked: list[TrackedCheckpoint] | None = None
    ) -> None:
        self._config = config
        self._kept: list[TrackedCheckpoint] = list(tracked or [])
        self._warned_missing = False

    def register(self, ckpt: TrackedCheckpoint) -> list[TrackedCheckpoint]:
        """Add a committed checkpoint; return those now evicted (to delete from storage)."""
        self._kept = [c for c in self._kept if c.dir_name != ckpt.dir_name]
        self._kept.append(ckpt)
        keep = self._config.num_to_keep
        if keep is None or len(self._kept) <= keep:
            return []
        ranked = sorted(self._kept, key=self._priority, reverse=True)
        survivors = {c.dir_name for c in ranked[:keep]}
        evicted = [c for c in self._kept if c.dir_name not in survivors]
        self._kept = [c for c in self._kept if c.dir_name in survivors]
        return evicted

    def _priority(self, ckpt: TrackedCheckpoint) -> tuple[float, int]:
        """Higher is better; recency breaks ties (and is the whole key without a score)."""
        attr = self._config.checkpoint_score_attribute
        if attr is None:
            return (0.0, ckpt.index)
        value = ckpt.metrics.get(attr)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            if not self._warned_missing:
                warnings.warn(
                    f"CheckpointConfig(checkpoint_score_attribute={attr!r}): a checkpoint was "
                    f"reported without a numeric {attr!r} metric; it ranks last.",
                    stacklevel=2,
                )
                self._warned_missing = True
            return (-math.inf, ckpt.index)
        score = float(value) if self._config.checkpoint_score_order == "max" else -float(value)
        return (score, ckpt.index)

    @property
    def kept(self) -> list[TrackedCheckpoint]:
        """Kept checkpoints in the order they were reported."""
        return sorted(self._kept, key=lambda c: c.index)

    @property
    def latest(self) -> TrackedCheckpoint | None:
        """The most recent kept checkpoint: what a restart or restore resumes from."""
        return max(self._kept, key=lambda c: c.index, default=None)

    @property
    def best_first(self) -> list[TrackedCheckpoint]:
        """Kept checkpoints, best first (most recent first without a score attribute)."""
        return sorted(self._kept, key=self._priority, reverse=True)
