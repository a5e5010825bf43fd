"""What the driver prints while a run goes: a compact line per report, and group events.

verbose=0 prints nothing; 1 (default) a line per report plus start, restart and end;
2 also worker placement. Lines go to the given stream (stdout by default).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

_SKIP = {"timestamp", "time_total_s", "training_iteration"}


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text if len(text) <= 24 else text[:21] + "..."


class ProgressReporter:
    def __init__(self, label: str, verbose: int | None, stream: TextIO | None = None) -> None:
        self._label = label
        self._verbose = 1 if verbose is None else verbose
        self._stream = stream

    def _print(self, level: int, line: str) -> None:
        if self._verbose >= level:
            stream = self._stream or sys.stdout
            print(f"({self._label}) {line}", file=stream, flush=True)

    def started(self, attempt: int, num_workers: int, resume: str | None) -> None:
        what = f"resuming from {resume}" if resume else "from scratch"
        self._print(1, f"attempt {attempt}: starting {num_workers} worker(s), {what}")

    def placed(self, placement: list[str]) -> None:
        self._print(2, "workers: " + ", ".join(placement))

    def reported(self, metrics: dict[str, Any], checkpoint: str | None) -> None:
        shown = "  ".join(f"{k}={_fmt_value(v)}" for k, v in metrics.items() if k not in _SKIP)
        it = metrics.get("training_iteration", "?")
        secs = metrics.get("time_total_s", 0.0)
        ckpt = f"  [saved {checkpoint}]" if checkpoint else ""
        self._print(1, f"iter {it} ({secs:.1f}s)  {shown}{ckpt}")

    def failed(self, description: str, action: str) -> None:
        first_line = description.splitlines()[0] if description else "failure"
        self._print(1, f"{first_line} -> {action}")

    def finished(self, status: str, iterations: int, elapsed_s: float, path: str) -> None:
        self._print(1, f"{status} after {iterations} report(s) in {elapsed_s:.1f}s; results in {path}")
