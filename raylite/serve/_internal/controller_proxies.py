"""The controller's proxy manager: one HTTP proxy actor per node (per `proxy_location`)."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

HEAD_RESOURCE = "node:__internal_head__"


class ProxyManager:
    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.proxies: dict[str, Any] = {}     # node id -> actor handle
        self.errors: dict[str, tuple[str, float]] = {}  # node id -> (last start error, when)
        self._lock = asyncio.Lock()

    def _wanted_nodes(self) -> list[tuple[str, bool]]:
        import raylite

        loc = str(self.controller.proxy_location)
        if loc.endswith("Disabled"):
            return []
        out = []
        for n in raylite.nodes():
            if not n.get("Alive", n.get("alive")):
                continue
            is_head = HEAD_RESOURCE in (n.get("Resources") or {})
            if loc.endswith("HeadOnly") and not is_head:
                continue
            out.append((n["NodeID"], is_head))
        return out

    async def reconcile(self, wait: bool) -> str:
        """Start missing proxies, replace dead ones; return the head proxy's error or ""."""
        async with self._lock:
            return await self._reconcile(wait)

    async def _reconcile(self, wait: bool) -> str:
        import raylite
        from raylite.serve._internal.proxy import ServeProxy
        from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        head_error = ""
        wanted = self._wanted_nodes()
        for node_id, is_head in wanted:
            actor = self.proxies.get(node_id)
            name = f"SERVE_PROXY::{node_id}"
            if actor is None:
                recent = self.errors.get(node_id)
                if recent is not None and (not wait or time.monotonic() - recent[1] < 10.0):
                    # it failed a moment ago (port in use, ...): report that, do not fight over the name
                    if is_head:
                        head_error = recent[0]
                    continue
                try:
                    actor = raylite.get_actor(name, namespace="serve")
                except ValueError:
                    cls = raylite.remote(ServeProxy)
                    actor = cls.options(name=name, namespace="serve", lifetime="detached", num_cpus=0,
                                        max_concurrency=100, scheduling_strategy=NodeAffinitySchedulingStrategy(
                                            node_id, soft=False)).remote(dict(self.controller.http_options))
                self.proxies[node_id] = actor
            try:
                ready = await asyncio.wait_for(_await(actor.ready.remote()), 30.0)
            except BaseException as e:  # noqa: BLE001 - dead proxy: start a new one next round
                self.proxies.pop(node_id, None)
                ready = {"ok": False, "error": f"the proxy on node {node_id[:8]} died: {e}"}
            if not ready["ok"]:
                self.errors[node_id] = (ready["error"], time.monotonic())
                self.proxies.pop(node_id, None)
                try:
                    raylite.kill(actor)
                except Exception:  # noqa: BLE001
                    pass
                if is_head:
                    head_error = ready["error"]
                else:
                    print(f"serve: {ready['error']}", file=sys.stderr)
            else:
                self.errors.pop(node_id, None)
        alive = {n for n, _ in wanted}
        for node_id in list(self.proxies):
            if node_id not in alive:
                self.proxies.pop(node_id, None)
        return head_error

    async def stop_all(self) -> None:
        import raylite

        async with self._lock:
            for actor in list(self.proxies.values()):
                try:
                    await asyncio.wait_for(_await(actor.shutdown.remote()), 5.0)
                except BaseException:  # noqa: BLE001
                    pass
                try:
                    raylite.kill(actor)
                except Exception:  # noqa: BLE001
                    pass
            self.proxies.clear()
            self.errors.clear()


async def _await(ref: Any) -> Any:
    return await ref
