"""Code pickled by value keeps its file name and carries its source lines.

cloudpickle 3.1 writes every code object it pickles by value (functions and classes defined in
`__main__`, a notebook cell, or a module registered with `register_pickle_by_value`) with
`co_filename = "<dynamic-code>"`, so a remote traceback read `File "<dynamic-code>", line 6,
in f` and showed no code. Ray's traceback names the user's file and shows the line.

`install()` replaces cloudpickle's reducer for code objects (once, for every pickler built on
cloudpickle's table: raylite's serializer, `raylite.cloudpickle`, Serve's and Train's payloads)
with one that keeps the real `co_filename` and ships the lines of that code from `linecache`
(the file on disk, or the cell's text IPython keeps there). Where the code is rebuilt,
`_rebuild` registers those lines in `linecache` under the same name when no such file can be
read there (a notebook cell, a script on another machine), so `traceback` prints each line as
it does locally. The rebuilt code object is exactly what cloudpickle would have built, file
name aside.
"""

from __future__ import annotations

import linecache
import os
import threading
import types
from typing import Any

_DYNAMIC = "<dynamic-code>"
_lock = threading.Lock()
_installed = False


def install() -> None:
    """Put `_reduce_code` in cloudpickle's dispatch table (idempotent)."""
    global _installed
    if _installed:
        return
    from cloudpickle import cloudpickle as cp

    table = getattr(cp.Pickler, "_dispatch_table", None)  # the dict its ChainMap reads first
    original = getattr(cp, "_code_reduce", None)
    if table is None or original is None:  # a cloudpickle that changed shape: leave it as it is
        return

    def reduce_code(obj: types.CodeType) -> Any:
        return _reduce_code(obj, original)

    table[types.CodeType] = reduce_code
    _installed = True


def _reduce_code(obj: types.CodeType, original: Any) -> Any:
    rebuild, args = original(obj)
    try:
        i = args.index(_DYNAMIC)
    except ValueError:  # this cloudpickle keeps the name itself
        return rebuild, args
    filename = obj.co_filename
    args = (*args[:i], "".join(filename), *args[i + 1:])
    first, lines = source_lines(obj)
    return _rebuild, (args, filename, first, lines)


def source_lines(code: types.CodeType) -> tuple[int, list[str]]:
    """(first line number, the lines from there to the code's last line), from linecache;
    (0, []) when the source is not known here."""
    try:
        lines = linecache.getlines(code.co_filename)
    except Exception:  # noqa: BLE001  an odd loader
        return 0, []
    if not lines:
        return 0, []
    first = code.co_firstlineno
    numbers = [n for _s, _e, n in code.co_lines() if n is not None]
    last = max(numbers, default=first)
    if first < 1 or last > len(lines):
        return 0, []
    return first, lines[first - 1:last]


def _rebuild(args: tuple, filename: str, first: int, lines: list[str]) -> types.CodeType:
    """Unpickling: the code object, and its lines made known to linecache if needed."""
    if lines:
        remember(filename, first, lines)
    return types.CodeType(*args)


def remember(filename: str, first: int, lines: list[str]) -> None:
    """Make `lines` (starting at line `first`) of `filename` readable through linecache, unless a
    file of that name can be read here (then linecache reads it, as for any local code)."""
    if filename in linecache.cache and linecache.cache[filename][1] is not None:
        return  # linecache read the real file already
    if os.path.isfile(filename):
        return
    with _lock:
        entry = linecache.cache.get(filename)
        known = list(entry[2]) if entry is not None and len(entry) == 4 else []
        end = first - 1 + len(lines)
        if len(known) < end:
            known.extend("\n" for _ in range(end - len(known)))
        known[first - 1:end] = lines
        # mtime None: linecache.checkcache keeps the entry (there is no file to compare with)
        linecache.cache[filename] = (sum(map(len, known)), None, known, filename)
