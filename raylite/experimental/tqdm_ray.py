"""`ray.experimental.tqdm_ray.tqdm`: progress bars from tasks and actors, drawn by the driver.

Use it in place of `tqdm.tqdm` inside remote code. Each bar sends its state (at most every
`flush_interval_s`, and always when it closes) with the worker's output; the driver draws every
bar in one place on its stderr, so bars from many workers do not overwrite each other (see
`raylite._core.client.progress_bars`). In the driver itself the bar reports to the same drawing.
A subset of tqdm's arguments is supported, as in Ray: iterable, desc, total, unit, position.
"""

from __future__ import annotations

import builtins
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from raylite._core import runtime
from raylite._core.client import progress_bars

__all__ = ["safe_print", "tqdm"]


class tqdm:  # noqa: N801  (Ray's name)
    """A progress bar whose drawing happens in the driver."""

    DEFAULT_FLUSH_INTERVAL_SECONDS = 1.0

    def __init__(self, iterable: Iterable | None = None, desc: str | None = None,
                 total: int | None = None, unit: str | None = None, position: int | None = None,
                 flush_interval_s: float | None = None) -> None:
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        self._iterable = iterable
        self._desc = desc or ""
        self._total = total
        self._unit = unit or "it"
        self._pos = position or 0
        self._uuid = uuid.uuid4().hex
        self._x = 0
        self._closed = False
        self._interval_s = (self.DEFAULT_FLUSH_INTERVAL_SECONDS if flush_interval_s is None
                            else flush_interval_s)
        self._last_flush = 0.0
        self._report(force=True)

    # tqdm's API -----------------------------------------------------------------------
    def update(self, n: int = 1) -> None:
        self._x += n
        self._report()

    def set_description(self, desc: str) -> None:
        self._desc = desc
        self._report()

    def refresh(self) -> None:
        self._report(force=True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._report(force=True)

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, total: int) -> None:
        self._total = total

    @property
    def n(self) -> int:
        return self._x

    @n.setter
    def n(self, n: int) -> None:
        self._x = n

    def __iter__(self) -> Iterator[Any]:
        if self._iterable is None:
            raise ValueError("tqdm() was given no iterable: pass one, or call update() yourself.")
        for item in self._iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # reporting -------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {"uuid": self._uuid, "pid": os.getpid(), "x": self._x, "pos": self._pos,
                "desc": self._desc, "total": self._total, "unit": self._unit, "closed": self._closed}

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < self._interval_s:
            return
        self._last_flush = now
        if runtime.is_worker():  # one whole line, so it is never split from its newline
            builtins.print(progress_bars.encode(self._state()) + "\n", end="", flush=True)
        else:
            progress_bars.BOARD.update("", self._state())


def safe_print(*args: Any, **kwargs: Any) -> None:
    """print() that does not tear the driver's bars (they are redrawn below the text)."""
    builtins.print(*args, **kwargs)
