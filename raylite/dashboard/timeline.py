"""raylite.timeline(): a Chrome trace of task and actor executions (chrome://tracing, Perfetto)."""

from __future__ import annotations

import json
import time
from typing import Any


def timeline(filename: str | None = None) -> list[dict[str, Any]] | None:
    """The cluster's task events as Chrome-trace events; written to `filename` if given (then
    None is returned, as in Ray). Events reach the head about once a second, so the calls of
    the last second are waited for."""
    from raylite._core import runtime
    from raylite.dashboard.state_client import timeline_events

    client = runtime.client()
    if client is not None and client.task_events is not None:
        client.call_soon(client.flush_task_events)
        time.sleep(client.config.task_events_flush_interval_s + 0.2)  # workers flush on their timer
    events = timeline_events()
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None
