"""The object plane of a CoreClient: put, get and wait, reading stored objects zero-copy,
freeing what nobody references, and answering borrowers'
status requests.

A component: it owns the object table (`entries`) and the mappings of store objects this
process holds; copies from other nodes come through the transfers (transfers.py)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.node_sync import BlockingNodeLink
from raylite._core.client.records import ObjectEntry, _FailFastLatch, _Latch, kind_failed
from raylite._core.client.refs import ObjectRef
from raylite._core.ids import ObjectID

if TYPE_CHECKING:
    from raylite._core.client.lineage import LineageRebuilder
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.transfers import ObjectTransfers

log = logging.getLogger("raylite.objects")
# a ref rebuilt from an id (ObjectRef(binary)) after every real reference was dropped
_BUSY_STORE_WAIT_S = 10.0  # how long a write waits for room that others' writes and restores hold
_RELEASED = ("its owner released it: every reference to it had been dropped, so it was freed. Keep "
             "the ObjectRef (from put() or .remote()) alive for as long as the value is needed.")


# How long a worker's get() waits before it tells its node it is blocked (and lends its CPU)
BLOCKED_GRACE_S = 0.05

class ObjectPlane:
    """put / get / wait and object transfer; owns the object table."""

    def __init__(self, links: ClientLinks, transfers: ObjectTransfers) -> None:
        self._links = links
        self._transfers = transfers
        self._lock = links.lock
        self._refs = links.refs
        self._address = links.address
        self._inline_max = links.config.inline_threshold_bytes
        self.entries: dict[bytes, ObjectEntry] = {}
        self._adopted: set[bytes] = set()  # entries adopt_entry() added: the owner frees their copies
        self.entry = self.entries.get  # the entry of an object id, or None (other components read it)
        links.gc_pacer.sizes.append(self.entries.__len__)
        self.frees_queued: collections.deque = collections.deque()  # frees handed to the loop, not yet sent
        self._mappings: dict[bytes, int] = {}  # store objects this process maps now (I/O loop only)
        self._mapping_news: dict[bytes, bool] = {}  # not yet told to the node: mapped or not
        self._mapping_flush = False
        self._node_sync: BlockingNodeLink | None = None  # blocking link to the node for user threads' round trips
        self._trim_armed = False  # a writer-map trim is scheduled
        self.lineage: LineageRebuilder  # set by the CoreClient once built (it needs this plane)
        # told which owned objects were just freed, when some stand for something else (an
        # actor's handles: ActorCaller.tokens_freed); None when nothing listens
        self.freed_hook: Callable[[list], None] | None = None
        # a driver's report of an owned error nobody read before its last ref went (Ray's
        # "Unhandled error"): called with the error's inline payload; None: not reported
        self.unhandled_error_hook: Callable[[Any], None] | None = None
        self._errors_read: set[bytes] = set()  # owned error objects a get() has raised
        self._prefetching: set[bytes] = set()  # wait(fetch_local=True) pulls left running (_prefetch)

    def owns_referenced(self) -> bool:
        """Whether some object this process owns is still referenced (here or by a borrower):
        a worker that retires (max_calls) serves its objects until this is False."""
        with self._lock:
            return any(rc.owned and rc.in_use() for rc in self._refs.refs.values())

    def expect(self, object_ids: list[bytes]) -> None:
        """A task's returns: owned, referenced once (by the refs handed out) and pending, in one go
        under the lock (a task may have 10,000 returns)."""
        refs = self._refs
        entries = self.entries
        address = self._address
        with self._lock:
            for oid in object_ids:
                refs.own(oid)
                refs.add_local(oid, address)
                entries[oid] = ObjectEntry()

    def adopt_value(self, object_id: bytes, kind: str, payload: Any) -> None:
        """An owned value that arrived ready (a generator's item): owned and in the table."""
        with self._lock:
            self._refs.own(object_id)
            self.entries[object_id] = ObjectEntry(kind, payload)

    def add_pending(self, object_id: bytes) -> ObjectEntry:
        """With the lock held: an owned object made again (lineage), pending until it is."""
        self._refs.own(object_id)
        entry = self.entries[object_id] = ObjectEntry()
        return entry

    def put(self, value: Any, *, _owner_address: str | None = None) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError("Calling put() on an ObjectRef is not allowed: it is already in the object "
                            "store. Pass the ref itself, or put([ref]) to wrap it in a list.")
        so = ser.serialize(value, what="the value passed to put()")
        object_id = ObjectID.for_put()
        kind, payload = self.store_value(object_id, so)
        with self._lock:
            self._refs.own(object_id)
            self.entries[object_id] = ObjectEntry(kind, payload)
        ref = ObjectRef(object_id, self._address)
        if so.contained_refs:
            with self._lock:
                self._refs.add_contained(object_id, [(r._id, r._owner) for r in so.contained_refs])
        return ref

    def promise(self, produce: Callable[[Callable[[], bool]], Awaitable[Any]]) -> ObjectRef:
        """An ObjectRef this process owns, whose value `produce(wanted)` gives later.

        `produce` is a coroutine function run on the I/O loop: no worker waits for it (a
        thousand `pg.ready()` refs cost a thousand coroutines, not a thousand processes).
        It may poll `wanted()`, false once every ref to the value is gone, to stop early.
        What it raises becomes the ref's error."""
        object_id = ObjectID.for_put()
        with self._lock:
            self._refs.own(object_id)
            self.entries[object_id] = ObjectEntry()
        ref = ObjectRef(object_id, self._address)

        def wanted() -> bool:
            return object_id in self.entries

        async def run() -> None:
            try:
                value = await produce(wanted)
                so = ser.serialize(value, what="a promised value")
            except BaseException as e:  # noqa: BLE001  the ref's error
                so = ser.serialize(e, kind=ser.KIND_ERROR)
            kind, payload = self.store_value(object_id, so)
            self.set_entry(object_id, kind, payload)

        asyncio.run_coroutine_threadsafe(run(), self._links.loop)
        return ref

    def store_value(self, object_id: bytes, so: ser.SerializedObject,
                     owner_address: str = "") -> tuple[str, Any]:
        """Inline small values; write big ones to this node's shared-memory store.

        owner_address: who owns the object when not this process (a task's return value
        belongs to its caller); the node frees an owner's objects when the owner exits."""
        kind = "e" if so.kind == ser.KIND_ERROR else "v"
        if so.total_bytes() <= self._inline_max:
            return kind, so.to_inline()
        path = os.path.join(self._links.store_dir, object_id.hex())
        owner = owner_address or self._address
        size = self._write_to_store(object_id, so, path, owner)
        msg = P.ObjectSealed(object_id, size, owner)
        if threading.current_thread() is self._links.thread:
            self._links.node.send(msg)
        else:
            self._links.loop.call_soon_threadsafe(self._links.send_node, msg)
        return "s", [self._links.node_id, self._links.node_public_address or self._links.node_address, size]

    def _write_to_store(self, object_id: bytes, so: ser.SerializedObject, path: str, owner: str) -> int:
        """Ask the node for room first (it spills LRU objects when full and hands over a
        recycled, already-faulted segment), then write the object once, in place."""
        if threading.current_thread() is self._links.thread:
            return ser.write_file(so, path)  # the loop cannot wait on the node; counted when sealed
        request = P.CreateObject(object_id, ser.stored_size(so), owner)

        def ask() -> Any:
            if self.frees_queued:
                # through the I/O loop, behind the frees it has yet to send: a put() right after a
                # del then finds the freed segment recycled, instead of overtaking its free
                return self._links.run_sync(self._links.node.request(request))
            return self._node_round_trip(request)

        reply = _ask_while_store_busy(ask, lambda r: r.ok)
        if not reply.ok:
            raise E.ObjectStoreFullError(reply.error)
        try:
            size = ser.write_into(so, path)
            self._wrote_segment()
            return size
        except BaseException:
            self._links.loop.call_soon_threadsafe(self._links.send_node, P.FreeObjects([object_id]))
            raise

    def _wrote_segment(self) -> None:
        """Any thread: a put() wrote a shared-memory segment whose mapping stays cached."""
        links = self._links
        if not self._trim_armed and not links.closed:
            self._trim_armed = True
            with contextlib.suppress(RuntimeError):
                links.loop.call_soon_threadsafe(links.loop.call_later, 2.0, self._trim_writer_maps)

    def _trim_writer_maps(self) -> None:
        """Unmap cached writer segments the node has deleted, so their memory really goes back."""
        if ser.drop_stale_writer_maps() and not self._links.closed:
            self._links.loop.call_later(2.0, self._trim_writer_maps)
        else:
            self._trim_armed = False

    def _node_round_trip(self, msg: P.Message) -> Any:
        """A user thread's request to the local node: over the blocking link (node_sync.py)
        when the node is on a Unix socket, else through the I/O loop."""
        link = self._node_sync
        if link is None and self._links.node_address.startswith("unix://"):
            with self._lock:
                if self._node_sync is None:
                    self._node_sync = BlockingNodeLink(self._links.node_address[len("unix://"):], self._links.token, self._links.kind)
                link = self._node_sync
        if link is None:
            return self._links.run_sync(self._links.node.request(msg))
        return link.request(msg)

    # ================================================================ freeing
    def release(self, free: list, unborrow: list) -> None:
        """Any thread: objects nobody references any more leave the table (stored copies are
        freed at their nodes), and borrows given back go to their owners."""
        links = self._links
        if links.closed:
            return
        if free and self.freed_hook is not None:
            self.freed_hook(free)
        stored = []
        unread = []
        self._links.gc_pacer.tick(len(free))
        with self._lock:
            for oid in free:
                entry = self.entries.pop(oid, None)
                if oid in self._adopted:  # its owner's copy: this process never held one to free
                    self._adopted.discard(oid)
                    continue
                if entry is not None and entry.kind == "s":
                    stored.append((oid, entry.payload))
                elif entry is not None and entry.kind == "e":
                    if oid in self._errors_read:
                        self._errors_read.discard(oid)
                    else:
                        unread.append(entry.payload)
            for _owner, oid in unborrow:
                if oid in self._adopted:  # the borrow ends, and with it the entry adopt_entry() added
                    self._adopted.discard(oid)
                    self.entries.pop(oid, None)
        self._report_unhandled(unread)
        if stored or unborrow:
            if stored:
                self.frees_queued.append(None)  # popped once sent (see _write_to_store)
            try:
                links.loop.call_soon_threadsafe(self._send_release, stored, unborrow, bool(stored))
            except RuntimeError:  # loop closed
                pass

    def _send_release(self, stored: list, unborrow: list, counted: bool = False) -> None:
        links = self._links
        node_id = links.node_id
        local = [oid for oid, loc in stored if loc[0] == node_id or self._transfers.cached_here(oid)]
        if local:
            try:
                links.node.send(P.FreeObjects(local))
            except Exception:  # noqa: BLE001
                pass
        if counted:  # after the connection's pending frames are written (its flush runs first)
            links.loop.call_soon(self.frees_queued.popleft)
        for oid, loc in stored:
            if loc[0] != node_id:
                links.loop.create_task(links.send_to(loc[1], P.FreeObjects([oid])))
        by_owner: dict[str, list] = {}
        for owner, oid in unborrow:
            by_owner.setdefault(owner, []).append(oid)
        for owner, oids in by_owner.items():
            links.loop.create_task(links.send_to(owner, P.RemoveBorrower(oids, self._address)))

    def close(self) -> None:
        if self._node_sync is not None:
            self._node_sync.close()

    def set_entry(self, object_id: bytes, kind: str, payload: Any) -> None:
        """Loop or user thread: an owned object became ready; wake its waiters."""
        self.set_entries(((object_id, kind, payload),))

    def set_entries(self, items: Any) -> None:
        """Several owned objects became ready (a task's returns): one pass under the lock,
        then their waiters are woken."""
        woken = []
        unowned = []
        unread = []
        with self._lock:
            for object_id, kind, payload in items:
                entry = self.entries.get(object_id)
                if entry is None:
                    # nobody holds a ref any more: free a stored copy at once; an error no one
                    # can read now is reported
                    if kind == "s":
                        unowned.append((object_id, payload))
                    elif kind == "e" and object_id not in self._adopted:
                        unread.append(payload)
                    continue
                if entry.kind is not None:
                    continue
                entry.kind = kind
                entry.payload = payload
                if entry.waiters:
                    woken.append((entry, entry.take_waiters()))
        if unowned:
            self._links.loop.call_soon(self._send_release, unowned, [])
        self._report_unhandled(unread)
        for entry, waiters in woken:
            for w in waiters:
                if isinstance(w, _FailFastLatch) and kind_failed(entry):
                    w.open()
                elif isinstance(w, _Latch):
                    w.count_down()
                else:
                    w(entry)

    # ================================================================ get / wait
    def adopt_entry(self, object_id: bytes, entry: ObjectEntry) -> ObjectEntry:
        """Remember where a borrowed object is, as its owner shipped it with a task's arguments,
        unless this process knows it already. Kept while refs to it live here (the worker holds
        the argument refs during the call), so a `get` of the same ref passed again, nested in
        another argument, finds it at once instead of asking the owner."""
        with self._lock:
            known = self.entries.setdefault(object_id, entry)
            if known is entry:
                self._adopted.add(object_id)
        return known if known.kind is not None else entry  # a fetch in flight: use the shipped one

    def entry_for(self, ref: ObjectRef) -> ObjectEntry:
        oid = ref._id
        entry = self.entries.get(oid)
        if entry is not None:
            return entry
        with self._lock:
            entry = self.entries.get(oid)
            if entry is not None:
                return entry
            entry = self.entries[oid] = ObjectEntry()
            if ref._owner == self._address or not ref._owner:
                entry.kind, entry.payload = "e", self._lost_error(oid, _RELEASED)
                return entry
        self._links.loop.call_soon_threadsafe(self.start_fetch, oid, ref._owner)
        return entry

    def _lost_error(self, oid: bytes, why: str) -> list:
        err = E.ObjectLostError(oid.hex(), why)
        return ser.serialize(err, kind=ser.KIND_ERROR).to_inline()

    def start_fetch(self, oid: bytes, owner: str) -> None:
        self._links.loop.create_task(self._fetch_status(oid, owner))

    async def _fetch_status(self, oid: bytes, owner: str) -> None:
        try:
            conn = await self._links.connection(owner)
            reply: P.GetObjectStatusReply = await conn.request(P.GetObjectStatus(oid, True))
            kind = {"inline": "v", "error": "e", "store": "s"}.get(reply.kind)
            if kind is None:
                self.set_entry(oid, "e", self._lost_error(oid, _RELEASED))
            else:
                self.set_entry(oid, kind, reply.payload)
        except Exception as e:  # noqa: BLE001
            err = E.OwnerDiedError(oid.hex(), f"its owner ({owner}) is unreachable: {e}. The process that "
                                   "created the object exited; keep the creating process alive while "
                                   "others use its objects.")
            self.set_entry(oid, "e", ser.serialize(err, kind=ser.KIND_ERROR).to_inline())

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        entries = [self.entry_for(r) for r in refs]
        pending = [e for e in entries if e.kind is None]
        if pending:
            if len(refs) > 1:  # Ray raises as soon as one of them has failed: never wait for the rest
                self.wait_entries(pending, len(pending), timeout, refs, fail_fast=True)
                self._raise_first_failure(refs, entries)
            else:
                self.wait_entries(pending, len(pending), timeout, refs)
        if len(refs) == 1:
            return [self.materialize(refs[0], entries[0])]
        ahead = _RestoreAhead(self._links, refs, entries)
        out = []
        for i, (r, e) in enumerate(zip(refs, entries)):
            ahead.advance(i)
            out.append(self.materialize(r, e, ahead))
        return out

    def _raise_first_failure(self, refs: list[ObjectRef], entries: list[ObjectEntry]) -> None:
        """After a fail-fast wait: while some refs are still pending, raise the first failed one's error."""
        if all(e.kind is not None for e in entries):
            return  # all ready: get() materializes them in order (the first error is raised there)
        for r, e in zip(refs, entries):
            if kind_failed(e):
                self.materialize(r, e)

    def wait_entries(self, entries: list[ObjectEntry], need: int, timeout: float | None, refs,
                      fail_fast: bool = False) -> None:
        latch = _FailFastLatch(need) if fail_fast else _Latch(need)
        registered = []
        with self._lock:
            ready = 0
            failed = False
            for e in entries:
                if e.kind is None:
                    e.add_waiter(latch)
                    registered.append(e)
                else:
                    ready += 1
                    failed = failed or kind_failed(e)
            for _ in range(min(ready, need)):
                latch.count_down()
            if fail_fast and failed:
                latch.open()
        if latch._n <= 0:
            self._drop_waiter(registered, latch)
            return
        hook = self._links.blocked_hook
        blocked = False
        try:
            if hook is None:
                ok = latch.wait(timeout)
            else:
                # a worker's get() that is answered at once (objects already in this node's
                # store: only their locations come from the owner) keeps its CPU, as in Ray;
                # one still waiting after BLOCKED_GRACE_S lends it to the node meanwhile
                grace = BLOCKED_GRACE_S if timeout is None else min(BLOCKED_GRACE_S, timeout)
                ok = latch.wait(grace)
                if not ok and (timeout is None or timeout > grace):
                    hook(True)
                    blocked = True
                    ok = latch.wait(None if timeout is None else timeout - grace)
        finally:
            if blocked:
                hook(False)
            self._drop_waiter(registered, latch)
        if not ok:
            n = sum(1 for e in entries if e.kind is None)
            raise E.GetTimeoutError(f"get() timed out after {timeout}s: {n} of {len(entries)} objects "
                                    "were not ready. Raise the timeout, or check `raylite status` for "
                                    "tasks waiting on resources.")

    def _drop_waiter(self, entries: list[ObjectEntry], latch: _Latch) -> None:
        with self._lock:
            for e in entries:
                e.remove_waiter(latch)

    def materialize(self, ref: ObjectRef, entry: ObjectEntry, ahead: _RestoreAhead | None = None) -> Any:
        kind, payload = entry.kind, entry.payload
        if kind == "v":
            return ser.from_inline(payload)
        if kind == "s":
            try:
                value_kind, value = self._read_stored(ref._id, payload, ahead)
            except E.ObjectLostError as lost:  # its node died: re-run the task that made it
                return self.materialize(ref, self.lineage.rebuild(ref._id, payload, lost))
            if value_kind == ser.KIND_ERROR:
                raise value
            return value
        if kind == "e":
            err = ser.from_inline(payload)
            if self.unhandled_error_hook is not None and ref._id in self.entries:
                self._errors_read.add(ref._id)  # handled: not reported when its refs go
            raise err
        raise E.RaySystemError(f"object {ref.hex()} has no value (kind={kind})")

    def _report_unhandled(self, payloads: list) -> None:
        hook = self.unhandled_error_hook
        if hook is None:
            return
        for payload in payloads:
            try:
                hook(payload)
            except Exception:  # noqa: BLE001 - a report must never break freeing
                log.debug("unhandled-error report failed", exc_info=True)

    def _read_stored(self, oid: bytes, location: list, ahead: _RestoreAhead | None = None) -> tuple[int, Any]:
        node_id = location[0]
        path = os.path.join(self._links.store_dir, oid.hex())
        if node_id != self._links.node_id and not os.path.exists(path):
            self._links.run_sync(self._transfers.pull(oid, location))
        follow = functools.partial(self._follow_mapping, oid)
        restoring = ahead.take(oid) if ahead is not None else None
        for _attempt in range(3):  # restored, then spilled again before we mapped it: once more
            try:
                return ser.read_file(path, follow)
            except FileNotFoundError:
                pass
            # spilled to disk? the node brings it back into shared memory
            reply = self._restore(oid, restoring)
            restoring = None
            if not reply.found:
                break
        if reply.error.startswith("Cannot restore"):
            raise E.ObjectStoreFullError(reply.error)
        raise E.ObjectLostError(oid.hex(), "its shared-memory file is gone (it was freed, or its "
                                f"node's store was cleared){': ' + reply.error if reply.error else ''}")

    def _restore(self, oid: bytes, restoring: Any) -> P.RestoreObjectReply:
        """Ask the node to bring a spilled object back (the first answer may be one already
        asked for ahead, `restoring`), as patiently as a write asks for room."""
        first = [restoring]

        def ask() -> P.RestoreObjectReply:
            ahead, first[0] = first[0], None
            return ahead.result() if ahead is not None else self._node_round_trip(P.RestoreObject(oid))

        return _ask_while_store_busy(ask, lambda r: r.found)

    # the node spills objects no one maps first: tell it which ones this process maps
    def _follow_mapping(self, oid: bytes, mapping: Any) -> None:
        """Any thread: `mapping` of a store object was made; count it until it is dropped."""
        done = weakref.finalize(mapping, self._mapping_changed_soon, oid, -1)
        done.atexit = False
        self._mapping_changed_soon(oid, 1)

    def _mapping_changed_soon(self, oid: bytes, delta: int) -> None:
        """Any thread, even inside a garbage collection: no lock, one queued call."""
        if not self._links.closed:
            with contextlib.suppress(RuntimeError):  # the loop is gone (interpreter exit)
                self._links.call_soon(self._mapping_changed, oid, delta)

    def _mapping_changed(self, oid: bytes, delta: int) -> None:
        """I/O loop: only the first mapping and the last unmapping are news to the node."""
        count = self._mappings.get(oid, 0) + delta
        if count > 0:
            self._mappings[oid] = count
            if count == 1 and delta > 0:
                self._mapping_news[oid] = True
        else:
            self._mappings.pop(oid, None)
            self._mapping_news[oid] = False
        if not self._mapping_flush:
            self._mapping_flush = True
            self._links.loop.call_soon(self._send_mapping_news)

    def _send_mapping_news(self) -> None:
        self._mapping_flush = False
        news, self._mapping_news = self._mapping_news, {}
        mapped = [oid for oid, on in news.items() if on]
        unmapped = [oid for oid, on in news.items() if not on]
        if mapped or unmapped:
            self._links.send_node(P.ObjectsMapped(mapped, unmapped))

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        entries = [self.entry_for(r) for r in refs]
        ready_count = sum(1 for e in entries if e.kind is not None)
        if ready_count < num_returns:
            try:
                self.wait_entries([e for e in entries if e.kind is None], num_returns - ready_count,
                                   timeout, refs)
            except E.GetTimeoutError:
                pass
        ready, not_ready = [], []
        for r, e in zip(refs, entries):
            (ready if e.kind is not None and len(ready) < num_returns else not_ready).append(r)
        if fetch_local and ready:
            fetched = self._fetch_remote(ready, deadline)
            if len(fetched) < len(ready):  # still on their way here: not ready yet
                late = (set(map(id, ready)) - set(map(id, fetched))) | set(map(id, not_ready))
                not_ready = [r for r in refs if id(r) in late]
                ready = fetched
        if fetch_local and not_ready:
            self._prefetch(not_ready)
        return ready, not_ready

    def _prefetch(self, refs: list[ObjectRef]) -> None:
        """wait(fetch_local=True) on a multi-node cluster: as in Ray, the objects it did not
        return that are computed on other nodes start coming here anyway (in the background,
        once each), so the next wait or get finds them local."""
        node_id, store_dir = self._links.node_id, self._links.store_dir
        todo = []
        for r in refs:
            oid = r._id
            if oid in self._prefetching:
                continue
            entry = self.entries.get(oid)
            if entry is None or entry.kind != "s" or entry.payload[0] == node_id:
                continue
            if os.path.exists(os.path.join(store_dir, oid.hex())):
                continue
            self._prefetching.add(oid)
            todo.append((oid, entry.payload))

        async def pull(oid: bytes, location: list) -> None:
            try:
                await self._transfers.pull(oid, location)
            except Exception:  # noqa: BLE001  a later get() pulls it again and reports why not
                pass
            finally:
                self._prefetching.discard(oid)

        for oid, location in todo:
            self._links.loop.call_soon_threadsafe(lambda o=oid, loc=location: self._links.loop.create_task(pull(o, loc)))

    def _fetch_remote(self, refs: list[ObjectRef], deadline: float | None) -> list[ObjectRef]:
        """wait(fetch_local=True): pull ready objects that live on other nodes into this
        node's store (in parallel, until the deadline); returns the refs now local."""
        remote = {}
        for r in refs:
            entry = self.entries.get(r._id)
            if entry is not None and entry.kind == "s" and entry.payload[0] != self._links.node_id \
                    and not os.path.exists(os.path.join(self._links.store_dir, r._id.hex())):
                remote[id(r)] = (r, entry.payload)
        if not remote:
            return refs

        async def pull_all() -> list:
            return await asyncio.gather(*(self._transfers.pull(r._id, loc) for r, loc in remote.values()),
                                        return_exceptions=True)

        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            results = self._links.run_sync(pull_all(), left)
        except Exception:  # noqa: BLE001  timed out: what arrived so far is local
            results = [None if os.path.exists(os.path.join(self._links.store_dir, r._id.hex())) else TimeoutError()
                       for r, _ in remote.values()]
        failed = {key for key, res in zip(remote, results)
                  if isinstance(res, BaseException) and not isinstance(res, E.ObjectLostError)}
        return [r for r in refs if id(r) not in failed]

    def future_of(self, ref: ObjectRef) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        entry = self.entry_for(ref)

        def resolve(_entry=None) -> None:
            def work() -> None:
                if fut.cancelled():  # the awaiting side gave up (asyncio timeout / cancel)
                    return
                try:
                    value = self.materialize(ref, entry)
                except BaseException as e:  # noqa: BLE001
                    if not fut.cancelled():
                        fut.set_exception(e)
                    return
                if not fut.cancelled():
                    fut.set_result(value)
            threading.Thread(target=work, daemon=True).start() if _needs_thread(entry) else work()

        with self._lock:
            if entry.kind is None:
                entry.add_waiter(resolve)
                return fut
        resolve()
        return fut

    # owner service: another process asks for one of our objects
    async def on_get_object_status(self, conn, msg: P.GetObjectStatus, rid):
        oid = msg.object_id
        entry = self.entries.get(oid)
        if entry is None:
            return P.GetObjectStatusReply(oid, "lost", None)
        if self._links.dead_nodes and entry.kind == "s":  # its only copy died with a node: rebuild it
            error = self.lineage.rebuild_for_borrower(oid)
            if error is not None:
                return P.GetObjectStatusReply(oid, "error", error)
        if entry.kind is None and msg.wait:
            fut = self._links.loop.create_future()
            with self._lock:
                if entry.kind is None:
                    entry.add_waiter(lambda e: fut.done() or self._links.loop.call_soon_threadsafe(_set_if_pending, fut))
                else:
                    fut.set_result(None)
            await fut
        kind = {"v": "inline", "e": "error", "s": "store"}.get(entry.kind, "lost")
        return P.GetObjectStatusReply(oid, kind, entry.payload)


def _ask_while_store_busy(ask: Callable[[], Any], granted: Callable[[Any], bool]) -> Any:
    """Ask the node until `granted(reply)`, while its refusal says the store's room is held only
    by objects being written or restored: that room frees up in moments (a generator's next
    value while the driver reads the last one; a put freed just before). The last reply comes
    back, granted or not, after at most _BUSY_STORE_WAIT_S."""
    deadline = time.monotonic() + _BUSY_STORE_WAIT_S
    delay_s = 0.01
    while True:
        reply = ask()
        if granted(reply) or P.BUSY_NOT_FULL not in (reply.error or "") or time.monotonic() + delay_s > deadline:
            return reply
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.5)


class _RestoreAhead:
    """One get() of many stored objects: ask the node to restore spilled ones a few places
    ahead of the one being read, so their copies back into memory overlap with the reading
    instead of each costing a round trip in turn."""

    WINDOW = 8  # objects
    BUDGET_BYTES = 64 << 20  # restored ahead and not read yet: big objects must not evict each other

    def __init__(self, client: ClientLinks, refs: list[ObjectRef], entries: list[ObjectEntry]) -> None:
        self._client = client
        self._refs = refs
        self._entries = entries
        self._next = 0
        self._pending: dict[bytes, tuple[concurrent.futures.Future, int]] = {}
        self._ahead_bytes = 0

    def advance(self, i: int) -> None:
        client = self._client
        while self._next < len(self._entries) and self._next <= i + self.WINDOW:
            entry = self._entries[self._next]
            if entry.kind == "s" and entry.payload[0] == client.node_id and self._pending and \
                    self._ahead_bytes + int(entry.payload[2]) > self.BUDGET_BYTES:
                return  # enough on its way: go on once the reader takes some
            oid = self._refs[self._next]._id
            self._next += 1
            if entry.kind != "s" or entry.payload[0] != client.node_id or oid in self._pending:
                continue
            if os.path.exists(os.path.join(client.store_dir, oid.hex())):
                continue
            size = int(entry.payload[2])
            self._ahead_bytes += size
            self._pending[oid] = (asyncio.run_coroutine_threadsafe(
                client.node.request(P.RestoreObject(oid)), client.loop), size)

    def take(self, oid: bytes) -> concurrent.futures.Future | None:
        pending = self._pending.pop(oid, None)
        if pending is None:
            return None
        self._ahead_bytes -= pending[1]
        return pending[0]


def _set_if_pending(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _needs_thread(entry: ObjectEntry) -> bool:
    return entry.kind == "s"
