"""RunState: what a run has done so far, persisted as run_state.json for restore().

Lifecycle of ``status``: PENDING -> RUNNING -> FINISHED | ERRORED; a restore sets it
back to RUNNING and carries history, kept checkpoints and failures forward.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from raylite.train._internal.checkpoints import TrackedCheckpoint


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no nan/inf; keep them readable
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _jsonable(item())
        except Exception:  # noqa: BLE001 - fall back to text
            pass
    return repr(value)


def _unjson(value: Any) -> Any:
    if value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, dict):
        return {k: _unjson(v) for k, v in value.items()}
    return value


@dataclass
class RunState:
    experiment_name: str
    status: str = "PENDING"
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[TrackedCheckpoint] = field(default_factory=list)
    failures: int = 0
    error: str | None = None
    # How checkpoints are ranked, so Result.from_path orders best_checkpoints the same way.
    score_attribute: str | None = None
    score_order: str = "max"

    def to_json(self) -> bytes:
        data = {
            "version": 1,
            "experiment_name": self.experiment_name,
            "status": self.status,
            "failures": self.failures,
            "error": self.error,
            "score_attribute": self.score_attribute,
            "score_order": self.score_order,
            "checkpoints": [_jsonable(c.to_json()) for c in self.checkpoints],
            "history": [_jsonable(h) for h in self.history],
        }
        return json.dumps(data, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RunState:
        data = json.loads(raw)
        return cls(
            experiment_name=data["experiment_name"],
            status=data.get("status", "PENDING"),
            history=[_unjson(h) for h in data.get("history", [])],
            checkpoints=[TrackedCheckpoint.from_json(_unjson(c)) for c in data.get("checkpoints", [])],
            failures=int(data.get("failures", 0)),
            error=data.get("error"),
            score_attribute=data.get("score_attribute"),
            score_order=data.get("score_order", "max"),
        )
