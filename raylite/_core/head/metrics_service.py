"""The head's metrics service: answers /metrics queries and keeps the time-series history.

A part of the head process (it reads the head's ControlStore directly), kept in its own
module so head.py stays a thin shell. Every `interval_s` it computes the cluster's
families (cluster_metrics.py) and appends every series to a TimeSeriesStore; the
dashboard server asks for the current families (GetClusterMetrics) and for history
(GetTimeSeries). Sampling costs well under a millisecond on a small cluster, and the
history's memory is bounded (timeseries.py), so it runs whether or not anyone looks:
the charts show the hour before the page was opened.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from raylite._core import protocol as P
from raylite._core.head import cluster_metrics
from raylite._core.head.timeseries import TimeSeriesStore

log = logging.getLogger(__name__)

INTERVAL_S = 5.0
HISTORY_POINTS = 720  # one hour at INTERVAL_S


def task_state_counts(table: Any) -> Mapping[str, int]:
    """Task attempts by state (none when the head keeps no task events)."""
    return table.state_counts() if table is not None else {}


class HeadMetrics:
    def __init__(self, store: Any, task_events: Any = None, interval_s: float = INTERVAL_S,
                 capacity: int = HISTORY_POINTS) -> None:
        self.store = store
        self.task_events = task_events  # task_events.TaskEventTable, or None
        self.interval_s = interval_s
        self.history = TimeSeriesStore(capacity)

    def handlers(self) -> dict[type, Callable[..., Any]]:
        return {P.GetClusterMetrics: self._on_get_metrics, P.GetTimeSeries: self._on_get_series}

    def families(self) -> list[dict[str, Any]]:
        return cluster_metrics.collect(self.store, task_state_counts(self.task_events))

    def sample(self, now: float | None = None) -> None:
        values = {key: value for fam in self.families() for key, value in fam["samples"]}
        self.history.add(values, time.time() if now is None else now)

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a bad feed value must not stop the history
                log.exception("metrics sample failed")
            await asyncio.sleep(self.interval_s)

    def _on_get_metrics(self, conn, msg: P.GetClusterMetrics, rid):
        return P.ClusterMetricsReply(self.families())

    def _on_get_series(self, conn, msg: P.GetTimeSeries, rid):
        # no names: every series under prefix ("" is all of them)
        names = list(msg.names) + (self.history.names(msg.prefix) if msg.prefix or not msg.names else [])
        return P.TimeSeriesReply(self.history.query(names, msg.since))
