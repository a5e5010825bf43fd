"""The ownership protocol of a CoreClient: counting this process's refs, registering its
borrows with their owners, serving the processes that borrow from it, and letting objects go
when the last reference anywhere is gone.

The counts live in the ReferenceCounter (reference_counter.py, shared through the links);
freeing a value is the object plane's (`ObjectPlane.release`).
"""

from __future__ import annotations

import collections
import os
from typing import TYPE_CHECKING, Any

from raylite._core import protocol as P
from raylite._core.client.records import ObjectEntry
from raylite._core.transport import rpc

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.objects import ObjectPlane


class Ownership:
    """Owns the queue of decrements from ObjectRef.__del__; counts refs and borrowers."""

    def __init__(self, links: ClientLinks, objects: ObjectPlane) -> None:
        self._links = links
        self._objects = objects
        self._lock = links.lock
        self._refs = links.refs
        self._address = links.address
        self._deleted: collections.deque = collections.deque()  # decrements queued by __del__

    def ref_created(self, object_id: bytes, owner_address: str, *, borrowed: bool = False) -> None:
        register = False
        with self._lock:
            self._refs.add_local(object_id, owner_address)
            if borrowed and owner_address != self._address:
                register = self._refs.borrow(object_id, owner_address)
        if register and not self._links.closed:
            self._register_borrow(object_id, owner_address)

    def _register_borrow(self, object_id: bytes, owner_address: str) -> None:
        links = self._links
        if links.on_loop():
            links.loop.create_task(self._send_add_borrower(object_id, owner_address))
            return
        try:
            links.run_sync(self._send_add_borrower(object_id, owner_address), timeout=30)
        except Exception:  # noqa: BLE001  the owner is gone; get() reports it
            pass

    async def _send_add_borrower(self, object_id: bytes, owner_address: str) -> None:
        conn = await self._links.connection(owner_address)
        await conn.request(P.AddBorrower([object_id], self._address))

    def ref_deleted(self, object_id: bytes) -> None:
        """Called from ObjectRef.__del__, which the GC may run while this thread holds the lock:
        never block on the lock here; queue the decrement and drain it when the lock is free."""
        links = self._links
        if links.closed:
            return
        self._deleted.append(object_id)
        if self._lock.acquire(blocking=False):
            try:
                free, unborrow = self._drain_deleted_locked()
            finally:
                self._lock.release()
            if free or unborrow:
                self._objects.release(free, unborrow)
        else:
            try:
                links.loop.call_soon_threadsafe(self._drain_deleted)
            except RuntimeError:  # loop closed
                pass

    def _drain_deleted_locked(self) -> tuple[list, list]:
        free: list = []
        unborrow: list = []
        while self._deleted:
            f, u = self._refs.remove_local(self._deleted.popleft())
            free += f
            unborrow += u
        return free, unborrow

    def _drain_deleted(self) -> None:
        with self._lock:
            free, unborrow = self._drain_deleted_locked()
        if free or unborrow:
            self._objects.release(free, unborrow)

    def adopt_contained(self, outer: bytes, inner: list) -> None:
        """A returned object holds refs: keep them alive (counted, borrowed) until it is freed.

        The worker registered us as their borrower before replying; if we no longer
        track the outer object, give those borrows back at once."""
        pairs = [(i[0], i[1]) for i in inner]
        with self._lock:
            if self._refs.count(outer) is not None:
                self._refs.add_contained(outer, pairs)
                return
        unborrow = [(owner, oid) for oid, owner in pairs if owner != self._address]
        if unborrow:
            self._objects.release([], unborrow)

    # ------------------------------------------------------------ borrowers of our objects
    def on_add_borrower(self, conn: Any, msg: P.AddBorrower, rid: int) -> P.Ack:
        conn.context["borrower_address"] = msg.borrower_address
        with self._lock:
            for oid in msg.object_ids:
                self._refs.add_borrower(oid, msg.borrower_address)
        return P.Ack()

    def on_remove_borrower(self, conn: Any, msg: P.RemoveBorrower, rid: int) -> None:
        free: list = []
        unborrow: list = []
        with self._lock:
            for oid in msg.object_ids:
                f, u = self._refs.remove_borrower(oid, msg.borrower_address)
                free += f
                unborrow += u
        self._objects.release(free, unborrow)
        return None

    def on_incoming(self, conn: rpc.Connection) -> None:
        conn.on_close.append(self._on_incoming_closed)

    def _on_incoming_closed(self, conn: rpc.Connection) -> None:
        """A borrower's connection closed: the borrower is gone, and so are its borrows."""
        addr = conn.context.get("borrower_address")
        if addr and not self._links.closed:
            with self._lock:
                free, unborrow = self._refs.drop_borrowers_at(addr)
            self._objects.release(free, unborrow)

    # ------------------------------------------------------------ the object table, for state
    def owned_objects(self) -> list:
        """Every object this process owns or references, with its counts (for raylite.util.state)."""
        out = []
        entry_of = self._objects.entry
        with self._lock:
            for oid, rc in self._refs.refs.items():
                entry = entry_of(oid)
                kind = (entry.kind or "") if entry is not None else ""
                out.append([oid, rc.owned, rc.owner_address, kind, _payload_size(kind, entry),
                            rc.local, rc.submitted, sorted(rc.borrowers), rc.contained])
        return out

    def on_list_owned_objects(self, conn: Any, msg: P.ListOwnedObjects, rid: int) -> P.ListOwnedObjectsReply:
        return P.ListOwnedObjectsReply(os.getpid(), self._links.kind, self.owned_objects())


def _payload_size(kind: str, entry: ObjectEntry | None) -> int:
    """Bytes of a ready object: inline payloads are [meta, [buffers]]; stored ones carry their size."""
    if entry is None or not kind:
        return 0
    try:
        if kind == "s":
            return int(entry.payload[2])
        meta, buffers = entry.payload[0], entry.payload[1]
        return len(meta) + sum(len(b) for b in buffers)
    except (TypeError, IndexError, ValueError):
        return 0
