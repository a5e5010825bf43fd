"""Per-process Serve client state: the event loop requests run on, the routers, the connection
pool, and the long poll that keeps replica sets and routes current.

In a replica or proxy the loop is that process's request loop (set by `set_process_loop`), so a
handle call made from user code never changes threads. In a driver the loop runs in a daemon
thread started on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import shutil
import tempfile
import threading
from typing import Any

from raylite.serve._internal.event_loops import start_loop_thread

CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"
SERVE_NAMESPACE = "serve"

_lock = threading.RLock()
_loop: asyncio.AbstractEventLoop | None = None
_state: ServeClientState | None = None
_local_mode = False  # serve.run(_local_testing_mode=True): routers are filled in-process, no controller


def set_local_mode(on: bool) -> None:
    global _local_mode
    _local_mode = on


def set_process_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _loop
    _loop = loop


def get_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = start_loop_thread("serve-client")
        return _loop


def state() -> ServeClientState:
    global _state
    with _lock:
        if _state is None:
            _state = ServeClientState()
        return _state


def reset() -> None:
    """Forget routers and the controller (after serve.shutdown or a new cluster)."""
    global _state
    with _lock:
        old, _state = _state, None
    if old is not None:
        old.close()


def get_controller(create_if_missing: bool = False) -> Any:
    import raylite

    try:
        return raylite.get_actor(CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        if not create_if_missing:
            raise
        return None


def _local_security() -> Any:
    """Local testing mode has no cluster: a fresh token for this process (both ends live here),
    and a private directory (mkdtemp: mode 0700, ours alone) for the replicas' Unix sockets."""
    from raylite.experimental import ChannelSecurity

    path = tempfile.mkdtemp(prefix="raylite-serve-")
    atexit.register(shutil.rmtree, path, True)
    return ChannelSecurity(token=secrets.token_bytes(32), socket_dir=path)


class ServeClientState:
    """Routers by (app, deployment), sharing one connection pool and one long poll, and the
    channel settings (token, TLS, limits) both ends of the direct channel use in this process."""

    def __init__(self) -> None:
        from raylite.runtime_context import get_runtime_context
        from raylite.serve._internal.router import ConnectionPool

        self.loop = get_loop()
        self.local = _local_mode
        if self.local:
            self.security = _local_security()
        else:
            from raylite.experimental import get_channel_security

            self.security = get_channel_security()
        self.pool = ConnectionPool("local" if self.local else get_runtime_context().get_node_id(), self.security)
        self.routers: dict[tuple[str, str], Any] = {}
        self.versions: dict[str, int] = {}
        self.listeners: dict[str, list] = {}
        self._poll_task: asyncio.Task | None = None
        self._report_task: asyncio.Task | None = None
        self.handle_id = f"{os.getpid()}-{id(self):x}"
        self.closed = False
        self._controller: Any = None

    def controller(self) -> Any:
        if self._controller is None:
            self._controller = get_controller()
        return self._controller

    def router(self, app_name: str, deployment_name: str) -> Any:
        """The router for a deployment (call on self.loop)."""
        key = (app_name, deployment_name)
        router = self.routers.get(key)
        if router is None:
            from raylite.serve._internal.router import Router

            router = Router(app_name, deployment_name, self.pool)
            self.routers[key] = router
            if self.local:
                return router
            self.subscribe(f"replicas/{app_name}/{deployment_name}", router.update)
            if self._report_task is None:
                self._report_task = self.loop.create_task(self._report_queued())
        return router

    def subscribe(self, key: str, callback: Any) -> None:
        """Call `callback(value)` now (once fetched) and on every change of `key` (on self.loop)."""
        new_key = key not in self.listeners
        self.listeners.setdefault(key, []).append(callback)
        self.loop.create_task(self._fetch_now(key))
        task = self._poll_task
        if task is not None and not task.done():
            if not new_key:
                return
            task.cancel()  # the poll in flight does not watch the new key: start one that does
        self._poll_task = self.loop.create_task(self._poll())

    async def _fetch_now(self, key: str) -> None:
        for attempt in range(200):
            try:
                out = await self.controller().listen_for_change.remote({key: -1}, 0.0)
                self._apply(out)
                return
            except Exception:  # noqa: BLE001 - controller restarting
                self._controller = None
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))

    def _apply(self, updates: dict) -> None:
        for key, (version, value) in updates.items():
            if version <= self.versions.get(key, -2) and version >= 0:
                continue
            self.versions[key] = version
            for cb in self.listeners.get(key, ()):
                cb(value)

    async def _poll(self) -> None:
        failures = 0
        while not self.closed:
            try:
                want = {k: self.versions.get(k, -1) for k in self.listeners}
                out = await self.controller().listen_for_change.remote(want, 5.0)
                failures = 0
                self._apply(out)
            except asyncio.CancelledError:
                return
            except Exception:  # noqa: BLE001 - controller restarting or gone
                failures += 1
                self._controller = None
                await asyncio.sleep(min(0.1 * failures, 1.0))

    async def _report_queued(self) -> None:
        """Tell the controller how many requests wait in this process's routers (autoscaling counts
        them; at zero replicas they are the only signal), while any wait and once after."""
        reported: dict[tuple[str, str], int] = {}
        while not self.closed:
            await asyncio.sleep(0.25)
            for key, router in list(self.routers.items()):
                n = router.queued()
                if n or reported.get(key):
                    reported[key] = n
                    try:
                        self.controller().record_handle_metrics.remote(key[0], key[1], self.handle_id, float(n))
                    except Exception:  # noqa: BLE001 - controller restarting
                        self._controller = None

    def close(self) -> None:
        self.closed = True
        task = self._poll_task
        loop = self.loop

        def _close() -> None:
            if task is not None:
                task.cancel()
            if self._report_task is not None:
                self._report_task.cancel()
            for conn in list(self.pool.conns.values()):
                conn.close()

        try:
            loop.call_soon_threadsafe(_close)
        except RuntimeError:
            pass
