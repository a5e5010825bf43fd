"""What the driver prints while a run goes: a compact line per report, and group events.

verbose=0 prints nothing; 1 (default) a line per report plus start, restart and end;
a report with an `epoch` metric, in a run whose train_loop_config gives the number of epochs
(`num_epochs`, `epochs` or `max_epochs`), also says how far the run is and when it should end
(`epoch 3/10 30% ETA 0:01:10`), as a Lightning or tqdm user expects;
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
EPOCH_KEYS = ("num_epochs", "epochs", "max_epochs")


def epochs_total(train_loop_config: Any) -> int | None:
    """The number of epochs a train_loop_config asks for, where it says so."""
    if not isinstance(train_loop_config, dict):
        return None
    for key in EPOCH_KEYS:
        value = train_loop_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds) + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


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
        epochs: int | None = None,
    ) -> None:
        self._label = label
        self.epochs = epochs  # the run's number of epochs, when its config says (epochs_total)
        self._epoch_base: int | None = None
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
        it = metrics.get("training_iteration", "?")
        secs = metrics.get("time_total_s", 0.0)
        epochs = self._epoch_progress(metrics, secs)
        skip = _SKIP | {"epoch"} if epochs else _SKIP  # `epoch 3/10` says it
        shown = "  ".join(f"{k}={_fmt_value(v)}" for k, v in metrics.items() if k not in skip)
        ckpt = f"  [saved {checkpoint}]" if checkpoint else ""
        line = f"iter {it} ({secs:.1f}s)  {epochs}{shown}{ckpt}"
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

    def _epoch_progress(self, metrics: dict[str, Any], elapsed_s: float) -> str:
        """`epoch 3/10 30% ETA 0:01:10  ` for the third epoch of 10, where the total is known;
        else "". Epochs count from 0 (Lightning, most loops) when the first one reported is 0,
        else from 1."""
        epoch = metrics.get("epoch")
        if not self.epochs or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            return ""
        if self._epoch_base is None:
            self._epoch_base = 0 if epoch == 0 else 1
        done = max(0, min(epoch + 1 - self._epoch_base, self.epochs))
        text = f"epoch {done}/{self.epochs} {done * 100 // self.epochs}%"
        if done < self.epochs and elapsed_s > 0:
            text += f" ETA {_clock(elapsed_s / done * (self.epochs - done))}"
        return text + "  "

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
