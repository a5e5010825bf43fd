"""`ray._private.client_mode_hook`: whether this program's calls go through Ray Client
(`init("ray://...")`). Test suites and libraries written for Ray ask `client_mode_should_convert()`
to skip or adapt what behaves differently there (reference counting, for one), and Ray's test
modules import its context managers at their top (test_generators.py: `enable_client_mode`).

raylite's Ray Client is a real connection (`init("ray://host:10001")`), never an in-process
conversion, so `enable_client_mode()` only marks the block (`is_client_mode_enabled()` is True
in it); it changes no call's path."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_marked = threading.local()


def client_mode_should_convert() -> bool:
    """True in a driver connected through `ray://`; False in a driver of its own cluster, in a
    worker, and before init()."""
    from raylite._core import runtime

    if runtime.is_worker():
        return False
    info = runtime.driver()
    return bool(getattr(info, "ray_client", False))


def is_client_mode_enabled() -> bool:
    """Connected through `ray://`, or inside `enable_client_mode()`."""
    return bool(getattr(_marked, "depth", 0)) or client_mode_should_convert()


@contextmanager
def enable_client_mode() -> Iterator[None]:
    """Mark this thread as in client mode for the block (see the module's docstring)."""
    _marked.depth = getattr(_marked, "depth", 0) + 1
    try:
        yield None
    finally:
        _marked.depth -= 1


@contextmanager
def disable_client_hook() -> Iterator[None]:
    """Ray's: calls in the block bypass the client hook. raylite has no hook: a no-op block."""
    yield None
