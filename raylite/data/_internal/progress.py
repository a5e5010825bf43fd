"""Per-operator progress bars on the driver's stderr (rows, blocks, throughput).

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
        elapsed = max(1e-6, time.perf_counter() - self._start)
        lines = []
        for op in self.ops:
            s = op.stats
            running = op.num_running()
            lines.append(
                f"- {op.name[:48]:<48} {s.rows_out:>10} rows {s.blocks_out:>6} blocks "
                f"{s.rows_out / elapsed:>10.0f} rows/s  running {running}"
            )
        return lines

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
