"""What every route gets: `DashboardContext` (the head client, config, paths, state helpers).

The state helpers return plain dicts with Ray's state API field names (see state.py for
how each row is built), so route modules can serve them as JSON or chart them.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

from raylite._core import protocol as P
from raylite._core.config import Config
from raylite._core.transport import rpc

_TIMEOUT_S = 10.0


class HeadClient:
    """The server's own rpc connection to the head; reconnects once if it was lost."""

    def __init__(self, address: str, token: str) -> None:
        self.address = address
        self.token = token
        self._conn: rpc.Connection | None = None
        self._lock = asyncio.Lock()
        self._peers: dict[str, rpc.Connection] = {}

    async def connection(self) -> rpc.Connection:
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await rpc.connect(self.address, {}, token=self.token, role="dashboard")
            return self._conn

    async def request(self, msg: P.Message, timeout_s: float = _TIMEOUT_S) -> Any:
        conn = await self.connection()
        return await conn.request(msg, timeout_s)

    async def request_peer(self, address: str, msg: P.Message, timeout_s: float = _TIMEOUT_S) -> Any:
        """Ask a node (or a driver/worker) directly, e.g. for its clients or its log files."""
        conn = self._peers.get(address)
        if conn is None or conn.is_closed():
            conn = self._peers[address] = await rpc.connect(address, {}, token=self.token, role="dashboard")
        return await conn.request(msg, timeout_s)

    def close(self) -> None:
        for conn in [self._conn, *self._peers.values()]:
            if conn is not None:
                conn.close()


@dataclass
class DashboardContext:
    """Handed to every `routes(ctx)`: use `await ctx.head.request(msg)` for anything else."""

    head: HeadClient
    config: Config
    session_dir: str
    token: str
    node_id: str  # the head's node (hex)
    url: str  # this server's base URL, e.g. http://127.0.0.1:8265
    cluster_address: str = ""  # what a job's driver joins: tcp://HOST:PORT of the head, or its unix socket
    started_at: float = field(default_factory=time.time)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def logs_dir(self) -> str:
        return os.path.join(self.session_dir, "logs")

    # Ray-shaped state rows (lists of dicts); see state.py
    async def nodes(self) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.nodes(self)

    async def actors(self) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.actors(self)

    async def tasks(self, job_id: str = "", limit: int = 0) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.tasks(self, job_id, limit)

    async def jobs(self) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.jobs(self)

    async def placement_groups(self) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.placement_groups(self)

    async def workers(self) -> list[dict[str, Any]]:
        from raylite.dashboard import state

        return await state.workers(self)

    async def log_files(self) -> list[dict[str, Any]]:
        from raylite.dashboard import logs

        return await logs.list_files(self)
