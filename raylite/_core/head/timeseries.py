"""The head's own metric history: a bounded ring buffer of samples (pure, no I/O).

The dashboard draws its charts from this, so nobody needs Prometheus to see how the
cluster did over the last hour. All series share one time axis (the head samples every
series at once), and each series is a fixed `array('d')` of `capacity` floats, NaN
where it had no value: 8 bytes a point, so 200 series over an hour at a 5 s period
(720 points) take about 1.2 MB. At most `max_series` series are kept; a new one
replaces the series updated longest ago, and series with no value left in the window
are dropped.

    ts = TimeSeriesStore(capacity=3)
    ts.add({"cpu": 10.0}, t=1); ts.add({"cpu": 20.0, "mem": 5.0}, t=2)
    ts.query(["cpu", "mem"]) == {"time": [1, 2], "cpu": [10.0, 20.0], "mem": [None, 5.0]}
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping

_NAN = float("nan")


class TimeSeriesStore:
    """Series name -> its values at the last `capacity` sample times."""

    def __init__(self, capacity: int = 720, max_series: int = 1000) -> None:
        if capacity < 1 or max_series < 1:
            raise ValueError("capacity and max_series must be >= 1")
        self.capacity = capacity
        self.max_series = max_series
        self._times = array("d", [_NAN] * capacity)
        self._series: dict[str, array] = {}
        # name -> sample number of its last value, the series updated longest ago first
        self._updated: OrderedDict[str, int] = OrderedDict()
        self._count = 0  # samples taken so far; the next one goes to slot _count % capacity

    def add(self, values: Mapping[str, float], t: float) -> None:
        """Record one sample at time `t`: every named series gets its value, others NaN.

        When full, a new series replaces the one updated longest ago, unless every kept series
        has a value in this very sample (a cluster with more series than fit, e.g. per-node
        ones on thousands of nodes): then the newcomer is left out, so a big sample keeps a
        stable set instead of churning every series out and in (each step O(1))."""
        slot = self._count % self.capacity
        self._times[slot] = t
        for column in self._series.values():
            column[slot] = _NAN
        now = self._count
        updated = self._updated
        for name, value in values.items():
            column = self._series.get(name)
            if column is None:
                if len(self._series) >= self.max_series:
                    stalest = next(iter(updated))
                    if updated[stalest] == now:
                        continue
                    del self._series[stalest], updated[stalest]
                column = self._series[name] = array("d", [_NAN] * self.capacity)
            column[slot] = float(value)
            updated[name] = now
            updated.move_to_end(name)
        self._count += 1
        oldest = self._count - self.capacity
        while updated:
            name = next(iter(updated))
            if updated[name] >= oldest:
                break
            del self._series[name], updated[name]

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._series if n.startswith(prefix))

    def _order(self) -> list[int]:
        n = min(self._count, self.capacity)
        start = self._count - n
        return [(start + i) % self.capacity for i in range(n)]

    def query(self, names: Iterable[str], since: float = 0.0) -> dict[str, list]:
        """Samples after `since`: {"time": [...], name: [value or None, ...]} (uPlot's columns)."""
        slots = [s for s in self._order() if self._times[s] > since]
        out: dict[str, list] = {"time": [self._times[s] for s in slots]}
        for name in names:
            column = self._series.get(name)
            if column is not None:
                out[name] = [None if math.isnan(column[s]) else column[s] for s in slots]
        return out

    def latest(self, name: str) -> float | None:
        column = self._series.get(name)
        if column is None or not self._count:
            return None
        value = column[(self._count - 1) % self.capacity]
        return None if math.isnan(value) else value

    def __len__(self) -> int:
        return len(self._series)
