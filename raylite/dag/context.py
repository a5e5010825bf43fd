"""DAGContext: settings for compiled graphs (`ray.dag.context.DAGContext`), read at compile time.

    ctx = DAGContext.get_current()
    ctx.max_inflight_executions = 20   # before experimental_compile()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass
class DAGContext:
    """Timeouts are in seconds. `max_inflight_executions`: executions submitted whose results
    have not all reached the driver; `execute` waits (up to `submit_timeout`) past it.
    `max_buffered_results`: results that reached the driver and wait to be read."""

    submit_timeout: float = 10
    get_timeout: float = 10
    teardown_timeout: float = 30
    read_iteration_timeout: float = 0.1
    buffer_size_bytes: int = 1_000_000
    max_inflight_executions: int = 10
    max_buffered_results: int = 1000
    overlap_gpu_communication: bool = False

    _current: ClassVar[DAGContext | None] = None

    @classmethod
    def get_current(cls) -> DAGContext:
        if cls._current is None:
            cls._current = cls()
        return cls._current


__all__ = ["DAGContext"]
