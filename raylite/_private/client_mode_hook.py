"""`ray._private.client_mode_hook.client_mode_should_convert()`: whether this program's calls go
through Ray Client (`init("ray://...")`). Test suites and libraries written for Ray ask it to
skip or adapt what behaves differently there (reference counting, for one)."""

from __future__ import annotations


def client_mode_should_convert() -> bool:
    """True in a driver connected through `ray://`; False in a driver of its own cluster, in a
    worker, and before init()."""
    from raylite._core import runtime

    if runtime.is_worker():
        return False
    info = runtime.driver()
    return bool(getattr(info, "ray_client", False))
