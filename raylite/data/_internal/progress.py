"""Per-operator progress bars on the driver's stderr (rows, blocks, throughput, and where the
total is known -- a range, a file listing, rows already counted -- the total, percent and ETA,
as Ray's and tqdm's bars show them).

Drawn only when stderr is a terminal and ``DataContext.enable_progress_bars``
is on; redrawn at most every ``REFRESH_S`` so a fast pipeline is not slowed by
its own reporting. One line per operator, rewritten in place.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

REFRESH_S = 0.25


class ProgressReporter:
    def __init__(self, ops: list[Any], enabled: bool = True, stream: TextIO | None = None,
                 force: bool = False) -> None:
        self.ops = ops
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = enabled and (isatty or force)
        self._last = 0.0
        self._lines_drawn = 0
        self._start = time.perf_counter()

    def _render(self) -> list[str]:
        now = time.perf_counter()
        return [render_line(op, now - (op.stats.started_s or self._start)) for op in self.ops]

    def update(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and now - self._last < REFRESH_S:
            return
        self._last = now
        lines = self._render()
        out = []
        if self._lines_drawn:
            out.append(f"\x1b[{self._lines_drawn}F")  # back to the first line we drew
        out.extend(line + "\x1b[K\n" for line in lines)
        self.stream.write("".join(out))
        self.stream.flush()
        self._lines_drawn = len(lines)

    def close(self) -> None:
        if self.enabled and self._lines_drawn >= 0:
            self.update(final=True)
            self.enabled = False


def render_line(op: Any, elapsed_s: float) -> str:
    """One operator's line: `- Map(f)   400/1000 rows  40% [####      ] 4 blocks 800 rows/s
    ETA 0:00:01  running 2`; without a known total, rows, blocks and rows/s only."""
    s = op.stats
    elapsed_s = max(1e-6, elapsed_s)
    rate = s.rows_out / elapsed_s
    total = _call(op, "expected_rows")
    tasks_total = _call(op, "expected_tasks")
    done_frac: float | None = None
    if total:
        rows = f"{f'{s.rows_out}/{total}':>21} rows"
        done_frac = min(1.0, s.rows_out / total)
        left_s = (total - s.rows_out) / rate if rate > 0 else None
    else:
        rows = f"{s.rows_out:>21} rows"
        left_s = None
        if tasks_total:  # rows unknown (files not read yet): count the read tasks instead
            done = max(0, s.tasks - op.num_running())
            done_frac = min(1.0, done / tasks_total)
            rows += f" {done}/{tasks_total} tasks"
            if 0 < done < tasks_total:
                left_s = elapsed_s / done * (tasks_total - done)
    line = f"- {op.name[:40]:<40} {rows}"
    if done_frac is not None:
        filled = int(done_frac * 10)
        line += f" {done_frac * 100:3.0f}% [{'#' * filled}{' ' * (10 - filled)}]"
    line += f" {s.blocks_out:>6} blocks {rate:>10.0f} rows/s"
    if left_s is not None and done_frac is not None and done_frac < 1.0:
        line += f"  ETA {_clock(left_s)}"
    return line + f"  running {op.num_running()}"


def _call(op: Any, name: str) -> Any:
    fn = getattr(op, name, None)
    try:
        return fn() if fn is not None else None
    except Exception:  # noqa: BLE001  a bar must never fail the pipeline
        return None


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds) + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
