"""Progress bars that tasks report and the driver draws (`ray.experimental.tqdm_ray`).

A bar inside a worker does not draw anything: it prints one line that starts with `MAGIC`
followed by its state as JSON. That line travels with the worker's other output to the
driver, whose output printer hands it to `BOARD` instead of printing it. The board keeps one
bar per (worker, bar id) and draws them all on the driver's stderr: redrawn in place at most
every `REDRAW_S` when stderr is a terminal, or one plain line when a bar starts and when it
closes otherwise (so logs stay readable). A bar created in the driver itself reports to the
same board directly.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

MAGIC = "__raylite_tqdm__"
REDRAW_S = 0.2
_WIDTH = 30


def encode(state: dict[str, Any]) -> str:
    """The line a worker prints for a bar's new state."""
    return MAGIC + json.dumps(state, separators=(",", ":"))


@dataclass
class Bar:
    desc: str
    total: int | None
    n: int
    unit: str
    started_at: float
    closed: bool = False

    def render(self, now: float) -> str:
        elapsed = max(1e-6, now - self.started_at)
        rate = f"{self.n / elapsed:.1f}{self.unit}/s"
        label = f"{self.desc}: " if self.desc else ""
        if self.total:
            frac = min(1.0, self.n / self.total)
            filled = int(frac * _WIDTH)
            return (f"{label}{frac * 100:3.0f}%|{'#' * filled}{' ' * (_WIDTH - filled)}| "
                    f"{self.n}/{self.total} [{elapsed:.0f}s, {rate}]")
        return f"{label}{self.n}{self.unit} [{elapsed:.0f}s, {rate}]"


class Board:
    """Every bar the driver knows, drawn together on one stream."""

    def __init__(self, stream: TextIO | None = None, clock: Any = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._bars: dict[tuple[str, str], Bar] = {}
        self._lock = threading.Lock()
        self._last_draw = 0.0
        self._drawn = 0

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def bars(self) -> dict[tuple[str, str], Bar]:
        with self._lock:
            return dict(self._bars)

    def handle_line(self, origin: str, line: str) -> bool:
        """Take a worker's output line; True when it was a bar update (do not print it)."""
        if not line.startswith(MAGIC):
            return False
        try:
            state = json.loads(line[len(MAGIC):])
        except ValueError:
            return False
        self.update(origin, state)
        return True

    def update(self, origin: str, state: dict[str, Any]) -> None:
        key = (origin, str(state.get("uuid", "")))
        now = self._clock()
        with self._lock:
            bar = self._bars.get(key)
            started = bar is None
            if bar is None:
                bar = self._bars[key] = Bar(str(state.get("desc") or ""), state.get("total"),
                                            int(state.get("x", 0)), str(state.get("unit") or "it"), now)
            bar.desc = str(state.get("desc") or bar.desc)
            bar.total = state.get("total", bar.total)
            bar.n = int(state.get("x", bar.n))
            bar.closed = bool(state.get("closed", False))
            self._draw(origin, bar, started, now)
            if bar.closed:
                del self._bars[key]

    def _draw(self, origin: str, bar: Bar, started: bool, now: float) -> None:
        stream = self.stream
        try:
            if getattr(stream, "isatty", lambda: False)():
                if bar.closed or started or now - self._last_draw >= REDRAW_S:
                    self._redraw_all(stream, now, also=bar if bar.closed else None)
            elif started or bar.closed:
                stream.write(f"{origin}{bar.render(now)}\n")
                stream.flush()
        except (OSError, ValueError):  # the stream went away: progress is not worth failing for
            pass

    def _redraw_all(self, stream: TextIO, now: float, also: Bar | None) -> None:
        out = [f"\x1b[{self._drawn}A"] if self._drawn else []
        if also is not None:  # a finished bar is written once more, above the live ones
            out.append(f"\x1b[2K{also.render(now)}\n")
        live = [b for b in self._bars.values() if not b.closed]
        out.extend(f"\x1b[2K{b.render(now)}\n" for b in live)
        out.append("\x1b[J")  # clear what is left below from a longer drawing
        stream.write("".join(out))
        stream.flush()
        self._drawn = len(live)
        self._last_draw = now


BOARD = Board()
