"""What the driver prints while a run goes: a compact line per report, and group events.

verbose=0 prints nothing; 1 (default) a line per report plus start, restart and end;
2 also worker placement. Lines go to the given stream (stdout by default). A loop that
reports every step would flood the terminal, so past 5 report lines a second the rest
are counted and the next line says how many were skipped (all are in the Result).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

_SKIP = {"timestamp", "time_total_s", "training_iteration"}


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text if len(text) <= 24 else text[:21] + "..."


class ProgressReporter:
    MAX_LINES_PER_S = 5

    def __init__(
        self,
        label: str,
        verbose: int | None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._verbose = 1 if verbose is None else verbose
        self._stream = stream
        self._clock = clock
        self._recent: deque[float] = deque(maxlen=self.MAX_LINES_PER_S)
        self._skipped = 0
        self._last_skipped: str | None = None

    def _print(self, level: int, line: str) -> None:
        if self._verbose >= level:
            stream = self._stream or sys.stdout
            print(f"({self._label}) {line}", file=stream, flush=True)

    def started(self, attempt: int, num_workers: int, resume: str | None) -> None:
        what = f"resuming from {resume}" if resume else "from scratch"
        self._print(1, f"attempt {attempt}: starting {num_workers} worker(s), {what}")

    def note(self, level: int, line: str) -> None:
        """A one-off remark about the run, shown at ``verbose >= level``."""
        self._print(level, line)

    def placed(self, placement: list[str]) -> None:
        self._print(2, "workers: " + ", ".join(placement))

    def reported(self, metrics: dict[str, Any], checkpoint: str | None) -> None:
        shown = "  ".join(f"{k}={_fmt_value(v)}" for k, v in metrics.items() if k not in _SKIP)
        it = metrics.get("training_iteration", "?")
        secs = metrics.get("time_total_s", 0.0)
        ckpt = f"  [saved {checkpoint}]" if checkpoint else ""
        line = f"iter {it} ({secs:.1f}s)  {shown}{ckpt}"
        now = self._clock()
        full = len(self._recent) == self._recent.maxlen
        if full and now - self._recent[0] < 1.0:
            self._skipped += 1
            self._last_skipped = line
            return
        self._recent.append(now)
        if self._skipped:
            line += f"  (+{self._skipped} report(s) not shown)"
            self._skipped, self._last_skipped = 0, None
        self._print(1, line)

    def _flush_skipped(self) -> None:
        if self._last_skipped is not None:
            more = f"  (+{self._skipped - 1} report(s) not shown)" if self._skipped > 1 else ""
            self._print(1, self._last_skipped + more)
            self._skipped, self._last_skipped = 0, None

    def failed(self, description: str, action: str) -> None:
        self._flush_skipped()
        first_line = description.splitlines()[0] if description else "failure"
        self._print(1, f"{first_line} -> {action}")

    def finished(self, status: str, iterations: int, elapsed_s: float, path: str) -> None:
        self._flush_skipped()
        self._print(1, f"{status} after {iterations} report(s) in {elapsed_s:.1f}s; results in {path}")
