"""The event loop a raylite process runs its I/O on: uvloop where it is installed, else asyncio's.

One place for the choice, shared by the driver's and the Ray Client's I/O threads and the node
daemon (Serve keeps its own: libraries use only the public API)."""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # type: ignore

        return uvloop.new_event_loop()
    except Exception:  # noqa: BLE001  not installed, or a build that cannot start here
        return asyncio.new_event_loop()
