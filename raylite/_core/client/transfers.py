"""Object transfers of a CoreClient: copying an object from another node's store into this
node's, over the peer's bulk stream (sendfile into a mapped file) when it has one, else in
chunks on a data connection of its own (so control messages to that node never queue behind
them). A copy pulled here is cached in this node's store for every process on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core.transport import rpc

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks


class ObjectTransfers:
    """Owns the data links to other nodes: bulk clients, chunk connections, bulk addresses."""

    def __init__(self, links: ClientLinks) -> None:
        self._links = links
        self.data_conns: dict[str, rpc.Connection] = {}  # chunked pulls, apart from control
        self._data_addresses: dict[bytes, str] = {}  # node id -> its bulk server HOST:PORT
        self._bulk_clients: dict[str, Any] = {}
        self._bulk_lock = threading.Lock()
        self._pulls: dict[bytes, asyncio.Future] = {}  # object id -> its pull in flight (I/O loop)

    async def pull(self, oid: bytes, location: list) -> None:
        """Copy an object from another node's store into ours (cached there for others). One
        pull per object at a time: a second caller (a get() behind a wait()'s prefetch) waits
        for the first one's copy instead of making another."""
        running = self._pulls.get(oid)
        if running is not None:
            try:
                await asyncio.shield(running)
                return
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this caller was cancelled
            # the first pull was cancelled (its caller was): this one copies it itself
        done = self._pulls[oid] = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # read: never "unretrieved"
        try:
            await self._pull_once(oid, location)
            done.set_result(None)
        except asyncio.CancelledError:
            done.cancel()
            raise
        except BaseException as e:
            done.set_exception(e)
            raise
        finally:
            if self._pulls.get(oid) is done:
                del self._pulls[oid]

    async def _pull_once(self, oid: bytes, location: list) -> None:
        if location[0] in self._links.dead_nodes:
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} died holding its only copy")
        try:
            if not await self._bulk_pull(oid, location):
                await self._pull_chunks(oid, location)
        except (E.ObjectLostError, E.ObjectStoreFullError):
            raise
        except Exception as e:  # noqa: BLE001
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} is unreachable ({e}); it "
                                    "held the only copy") from None

    async def _bulk_pull(self, oid: bytes, location: list) -> bool:
        """Pull over the peer's bulk stream (sendfile -> mapped file); False if it has none."""
        addr = self._data_addresses.get(location[0])
        if addr is None:
            info = await self._links.head.request(P.GetClusterInfo())
            for n in info.nodes:
                self._data_addresses[n["node_id"]] = n.get("data_address", "")
            addr = self._data_addresses.get(location[0], "")
        if not addr:
            return False
        path = os.path.join(self._links.store_dir, oid.hex())
        # room in our store under a scratch id: the node makes space (spilling if it must) and
        # hands over a recycled segment whose pages are already faulted in; renamed when done,
        # so readers on this node never see a half-written object
        scratch = os.urandom(20)
        reply = await self._links.node.request(P.CreateObject(scratch, location[2], ""))
        if not reply.ok:
            raise E.ObjectStoreFullError(reply.error)
        tmp = os.path.join(self._links.store_dir, scratch.hex())
        try:
            total = await self._links.loop.run_in_executor(None, self._bulk_pull_blocking, addr, oid, tmp)
            if total is None:
                raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
            os.replace(tmp, path)
            self._links.node.send(P.ObjectSealed(oid, total, "", True))
        finally:
            self._links.node.send(P.FreeObjects([scratch]))  # its reservation; the file moved on (or is recycled)
        return True

    def cached_here(self, oid: bytes) -> bool:
        """Multi-node: a copy of a remote object was pulled into our node's store."""
        return self._links.node_public_address != self._links.node_address and \
            os.path.exists(os.path.join(self._links.store_dir, oid.hex()))

    def _bulk_pull_blocking(self, addr: str, oid: bytes, tmp: str) -> int | None:
        from raylite._core.transport.bulk import BulkClient

        with self._bulk_lock:
            client = self._bulk_clients.get(addr)
            if client is None:
                client = self._bulk_clients[addr] = BulkClient(addr, self._links.token)
        try:
            return client.pull(oid, tmp)
        except BaseException:
            with self._bulk_lock:
                if self._bulk_clients.get(addr) is client:
                    del self._bulk_clients[addr]
            client.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def _pull_chunks(self, oid: bytes, location: list) -> None:
        """Chunks travel on a connection of their own (so control messages to that node never
        queue behind them), several requests in flight to keep the link busy."""
        node_address = location[1]
        conn = self.data_conns.get(node_address)
        if conn is None or conn.is_closed():
            conn = await rpc.connect(node_address, {}, token=self._links.token, role=self._links.kind)
            self.data_conns[node_address] = conn
        chunk = 4 << 20
        path = os.path.join(self._links.store_dir, oid.hex())
        tmp = path + f".part{os.getpid()}_{id(conn) & 0xffff}"
        first: P.PullObjectReply = await conn.request(P.PullObject(oid, 0, chunk))
        if not first.found:
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
        total = first.total_size
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, first.data, 0)
            offsets = list(range(len(first.data), total, chunk))
            window = 4
            for i in range(0, len(offsets), window):
                futs = [conn.request_future(P.PullObject(oid, off, chunk)) for off in offsets[i:i + window]]
                for off, fut in zip(offsets[i:i + window], futs):
                    reply: P.PullObjectReply = await fut
                    if not reply.found:
                        raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
                    os.pwrite(fd, reply.data, off)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._links.node.send(P.ObjectSealed(oid, total, "", True))

    def node_died(self, node_id: bytes, address: str) -> None:
        """I/O loop: drop data links to a dead node; a pull blocked on a cut link wakes up and
        reports the object lost."""
        c = self.data_conns.pop(address, None)
        if c is not None:
            c.abort()
        data = self._data_addresses.get(node_id)
        if data:
            with self._bulk_lock:
                bulk = self._bulk_clients.pop(data, None)
            if bulk is not None:
                bulk.close()
