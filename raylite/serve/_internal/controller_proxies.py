"""The controller's proxy manager: one HTTP proxy actor per node (per `proxy_location`), each
serving a listening socket held by the node's socket holder actor."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

HEAD_RESOURCE = "node:__internal_head__"


class ProxyManager:
    """Per node: a `ProxySocketHolder` owning the port and a `ServeProxy` serving it.

    Both actors restart in place when they die (Core's `max_restarts=-1`, tens of milliseconds),
    and the port keeps accepting meanwhile (the other one still holds the socket). This loop
    creates what is missing, and retries a node whose proxy could not start (port in use) after
    `RETRY_S`, instead of giving it up.
    """

    RETRY_S = 10.0

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.proxies: dict[str, Any] = {}     # node id -> proxy actor handle
        self.holders: dict[str, tuple[Any, str]] = {}  # node id -> (socket holder handle, token)
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
        head_error = ""
        wanted = self._wanted_nodes()
        for node_id, is_head in wanted:
            recent = self.errors.get(node_id)
            if recent is not None and node_id not in self.proxies and (
                    not wait and time.monotonic() - recent[1] < self.RETRY_S):
                # it failed a moment ago (port in use, ...): report that, retry a little later
                if is_head:
                    head_error = recent[0]
                continue
            error = await self._ensure_node(node_id)
            if error:
                self.errors[node_id] = (error, time.monotonic())
                if is_head:
                    head_error = error
                else:
                    print(f"serve: {error}", file=sys.stderr)
            else:
                self.errors.pop(node_id, None)
        alive = {n for n, _ in wanted}
        for node_id in list(self.proxies):
            if node_id not in alive:
                self.proxies.pop(node_id, None)
                self.holders.pop(node_id, None)
        return head_error

    async def _ensure_node(self, node_id: str) -> str:
        """Make sure the node's socket holder and proxy run; "" or why they cannot."""
        import raylite
        from raylite.serve._internal.proxy import ServeProxy
        from raylite.serve._internal.proxy_socket import ProxySocketHolder, holder_options
        from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts = dict(self.controller.http_options)
        holder, token = self.holders.get(node_id) or (None, "")
        if holder is None:
            try:
                holder = raylite.get_actor(f"SERVE_PROXY_SOCKET::{node_id}", namespace="serve")
                token = ""
            except ValueError:
                token = uuid.uuid4().hex[:12]
                holder = raylite.remote(ProxySocketHolder).options(**holder_options(node_id)).remote(
                    opts.get("host", "127.0.0.1"), int(opts.get("port", 8000)), token)
        try:
            held = await asyncio.wait_for(_await(holder.ready.remote()), 30.0)
        except BaseException:  # noqa: BLE001 - restarting (Core brings it back), or its node is going away
            self.holders.pop(node_id, None)
            return ""
        if not held["ok"]:  # the port is taken: the holder tries again when asked next round
            self.holders[node_id] = (holder, token)
            return held["error"]
        token = token or held["path"].rsplit("listen-", 1)[-1][:-2]
        self.holders[node_id] = (holder, token)
        actor = self.proxies.get(node_id)
        if actor is None:
            name = f"SERVE_PROXY::{node_id}"
            try:
                actor = raylite.get_actor(name, namespace="serve")
            except ValueError:
                cls = raylite.remote(ServeProxy)
                actor = cls.options(name=name, namespace="serve", lifetime="detached", num_cpus=0,
                                    max_concurrency=100, max_restarts=-1,
                                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
                                    ).remote(opts, token)
            self.proxies[node_id] = actor
        try:
            ready = await asyncio.wait_for(_await(actor.ready.remote()), 30.0)
        except BaseException:  # noqa: BLE001 - restarting: Core brings it back; look again next round
            self.proxies.pop(node_id, None)
            return ""
        if not ready["ok"]:
            self.proxies.pop(node_id, None)
            self._kill(actor)
            return ready["error"]
        return ""

    @staticmethod
    def _kill(actor: Any) -> None:
        import raylite

        try:
            raylite.kill(actor)
        except Exception:  # noqa: BLE001
            pass

    async def stop_all(self) -> None:
        import raylite

        async with self._lock:
            for node_id, _is_head in self._wanted_nodes():  # also those a restarted controller never met
                for name, table in ((f"SERVE_PROXY::{node_id}", self.proxies),
                                    (f"SERVE_PROXY_SOCKET::{node_id}", self.holders)):
                    if node_id not in table:
                        try:
                            actor = raylite.get_actor(name, namespace="serve")
                        except ValueError:
                            continue
                        table[node_id] = actor if table is self.proxies else (actor, "")
            for actor in list(self.proxies.values()):
                try:
                    await asyncio.wait_for(_await(actor.shutdown.remote()), 5.0)
                except BaseException:  # noqa: BLE001
                    pass
                self._kill(actor)
            for holder, _token in list(self.holders.values()):
                try:
                    await asyncio.wait_for(_await(holder.close.remote()), 5.0)
                except BaseException:  # noqa: BLE001
                    pass
                self._kill(holder)
            self.proxies.clear()
            self.holders.clear()
            self.errors.clear()


async def _await(ref: Any) -> Any:
    return await ref
