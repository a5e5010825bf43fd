"""The worker's process title, as Ray sets it, for `ps`, `top`, `htop` and py-spy.

`ray::<task name>` while a task or actor call runs (the name is `options(name=)`'s or the
function's, `Class.method` for an actor call), `ray::IDLE` for a task worker between tasks,
`ray::<Class>` for an actor between calls. Users find a stuck task by its title, and Ray's
tests read it from `psutil.Process().cmdline()[0]`. The title is the process's whole argv, so
setting it costs a fraction of a microsecond; it is only set when it changes.
"""

from __future__ import annotations

import os

try:
    from setproctitle import setproctitle as _set_title
except ImportError:  # optional: without it, titles stay the interpreter's command line
    _set_title = None

IDLE = "ray::IDLE"
_current = ""


def set_title(title: str) -> None:
    """Make `title` the process's title (its argv as `ps` shows it), if it is not already."""
    global _current
    if title == _current or _set_title is None:
        return
    first = not _current
    _current = title
    try:
        if first:
            # The first call sets the module up. SPT_NOENV keeps the title within argv's
            # space: without it the environment's memory is taken too, and
            # /proc/<pid>/environ (which tools and tests read) turns to garbage.
            saved = os.environ.get("SPT_NOENV")
            os.environ["SPT_NOENV"] = "1"
            try:
                _set_title(title)
            finally:
                if saved is None:
                    os.environ.pop("SPT_NOENV", None)
                else:
                    os.environ["SPT_NOENV"] = saved
        else:
            _set_title(title)
    except Exception:  # noqa: BLE001  a title is cosmetic: never fail a task over it
        pass
