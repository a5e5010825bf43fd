"""Plain-text tables for the CLI (no dependency)."""

from __future__ import annotations

import time
from typing import Any


def format_table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_time_ms(ms: int | float | None) -> str:
    """Epoch milliseconds as local 'YYYY-MM-DD HH:MM:SS' ('-' for none), as `job list` shows them."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"
