"""A node's log files (<session>/logs), listed and read in pieces for `raylite logs`.

Names are plain file names inside the logs folder; anything with a path separator or
leading dot is refused, so a request can never read outside it.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO


def logs_dir(session_dir: str) -> str:
    return os.path.join(session_dir, "logs")


def list_files(session_dir: str) -> list[list[Any]]:
    """[[name, size_bytes, mtime_s], ...] sorted by name."""
    folder = logs_dir(session_dir)
    out = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        out.append([name, st.st_size, st.st_mtime])
    return out


def safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def read(session_dir: str, name: str, offset: int, length: int, tail_lines: int = -1) -> tuple[bool, bytes, int]:
    """(found, data, end offset). tail_lines >= 0 reads the last N lines instead of offset."""
    if not safe_name(name):
        return False, b"", 0
    path = os.path.join(logs_dir(session_dir), name)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if tail_lines >= 0:
                return True, _tail_lines(f, size, tail_lines, length), size
            f.seek(min(offset, size))
            data = f.read(max(0, length))
            return True, data, min(offset, size) + len(data)
    except OSError:
        return False, b"", 0


def _tail_lines(f: BinaryIO, size: int, lines: int, max_bytes: int) -> bytes:
    if lines == 0:
        return b""
    block = 64 * 1024
    pos = size
    data = b""
    while pos > 0 and data.count(b"\n") <= lines and len(data) < max_bytes:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step) + data
    parts = data.split(b"\n")
    trailing = data.endswith(b"\n")
    keep = parts[-(lines + 1):] if trailing else parts[-lines:]
    return b"\n".join(keep)[-max_bytes:]
