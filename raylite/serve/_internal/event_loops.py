"""Serve's event loops: uvloop where installed, each running forever in a daemon thread.

The replica's and the proxy's request loops and a driver's client loop are made here; the client
state (`client.py`) adopts a replica's or proxy's loop with `set_process_loop`.
"""

from __future__ import annotations

import asyncio
import threading


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()


def start_loop_thread(name: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop running forever in a daemon thread."""
    loop = new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    threading.Thread(target=run, name=name, daemon=True).start()
    ready.wait()
    return loop
