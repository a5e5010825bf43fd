"""What the dashboard shows of a Train run, published to the cluster's KV store.

The controller tells the feed about attempts, every rank's reports and the run's end;
the feed keeps a bounded copy (the last `MAX_POINTS` reports per rank) and writes it as
one JSON value under namespace "train", key "run:<experiment name>", at most once per
`PUBLISH_INTERVAL_S` (longer for a big document: one more second per 100 kB, so a wide
run does not flood the head's KV store, which may persist every write) and once more when
the run ends. The dashboard reads it to draw
per-rank metric charts while the run trains and per-rank step durations side by side
(a straggler's bars stand out).

It uses only the public KV API, and does nothing when the process is not connected
to a cluster (the controller's unit tests run without one). A failed write never
touches the run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

NAMESPACE = "train"
MAX_POINTS = 500
PUBLISH_INTERVAL_S = 1.0


def _default_put(key: str, value: bytes) -> None:
    from raylite.experimental import internal_kv as kv

    if kv._internal_kv_initialized():
        kv._internal_kv_put(key, value, namespace=NAMESPACE)


class RunFeed:
    """A Train run's status, attempts, checkpoints and per-rank metrics, for the dashboard."""

    def __init__(self, name: str, trainer: str, num_workers: int, *,
                 put: Callable[[str, bytes], None] = _default_put,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._put = put
        self._clock = clock
        self._last_publish = -math.inf
        self._interval_s = PUBLISH_INTERVAL_S
        self._dirty = True
        self.doc: dict[str, Any] = {
            "name": name, "trainer": trainer, "num_workers": num_workers, "status": "RUNNING",
            "attempt": 0, "started_at": time.time(), "updated_at": time.time(), "error": None,
            "checkpoints": [], "reports": 0, "ranks": {},
        }
        self._last_time: dict[int, float] = {}

    def attempt(self, number: int) -> None:
        self.doc["attempt"] = number
        self._last_time.clear()  # a restart's first step is no step duration
        self._dirty = True
        self.publish(force=True)

    def report(self, rank: int, step: int, metrics: dict[str, Any], timestamp: float) -> None:
        ranks = self.doc["ranks"].setdefault(str(rank), {"metrics": {}, "step_s": []})
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            points = ranks["metrics"].setdefault(key, [])
            points.append([step, value])
            del points[:-MAX_POINTS]
        previous = self._last_time.get(rank)
        if timestamp and previous:
            ranks["step_s"].append([step, round(timestamp - previous, 6)])
            del ranks["step_s"][:-MAX_POINTS]
        if timestamp:
            self._last_time[rank] = timestamp
        self.doc["reports"] += 1
        self._dirty = True

    def checkpoints(self, kept: list[Any]) -> None:
        self.doc["checkpoints"] = [{"dir": c.dir_name, "metrics": _plain(c.metrics)} for c in kept]
        self._dirty = True

    def finished(self, status: str, error: str | None) -> None:
        self.doc["status"], self.doc["error"] = status, error
        self._dirty = True
        self.publish(force=True)

    def publish(self, force: bool = False) -> None:
        now = self._clock()
        if not self._dirty or (not force and now - self._last_publish < self._interval_s):
            return
        self._last_publish, self._dirty = now, False
        self.doc["updated_at"] = time.time()
        body = json.dumps(self.doc, default=str).encode()
        self._interval_s = PUBLISH_INTERVAL_S + len(body) / 100_000
        try:
            self._put(f"run:{self.doc['name']}", body)
        except Exception:  # noqa: BLE001 - the dashboard feed never fails a run
            pass


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, str | int | float | bool) or v is None}
