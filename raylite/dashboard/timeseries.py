"""The head's own metric history: a bounded ring buffer per series (pure, no I/O).

The dashboard draws its charts from this, so nobody needs Prometheus to see how the
cluster did over the last hour. Each series keeps at most `capacity` points; with the
sampler's 5 s period and the default 720 points that is one hour. Memory stays bounded
by `max_series` too: series that stop being updated (a finished job's tags, a dead node)
are dropped oldest-update first once the limit is reached.

    ts = TimeSeriesStore(capacity=3)
    ts.add({"cpu": 10.0}, t=1); ts.add({"cpu": 20.0}, t=2)
    ts.query(["cpu"]) == {"cpu": [[1, 2], [10.0, 20.0]]}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping


class TimeSeriesStore:
    """Series name -> the last `capacity` (time, value) points."""

    def __init__(self, capacity: int = 720, max_series: int = 2000) -> None:
        if capacity < 1 or max_series < 1:
            raise ValueError("capacity and max_series must be >= 1")
        self.capacity = capacity
        self.max_series = max_series
        self._series: dict[str, deque[tuple[float, float]]] = {}
        self._updated: dict[str, float] = {}

    def add(self, values: Mapping[str, float], t: float) -> None:
        """Append one point at time `t` to each named series."""
        for name, value in values.items():
            points = self._series.get(name)
            if points is None:
                if len(self._series) >= self.max_series:
                    self._evict()
                points = self._series[name] = deque(maxlen=self.capacity)
            points.append((t, float(value)))
            self._updated[name] = t

    def _evict(self) -> None:
        stalest = min(self._updated, key=self._updated.__getitem__)
        del self._series[stalest], self._updated[stalest]

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._series if n.startswith(prefix))

    def query(self, names: Iterable[str], since: float = 0.0) -> dict[str, list[list[float]]]:
        """Points after `since` as {name: [[times...], [values...]]} (uPlot's column layout)."""
        out: dict[str, list[list[float]]] = {}
        for name in names:
            points = self._series.get(name)
            if points is None:
                continue
            kept = [p for p in points if p[0] > since]
            out[name] = [[p[0] for p in kept], [p[1] for p in kept]]
        return out

    def latest(self, name: str) -> float | None:
        points = self._series.get(name)
        return points[-1][1] if points else None

    def __len__(self) -> int:
        return len(self._series)
