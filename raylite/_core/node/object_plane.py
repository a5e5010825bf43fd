"""The node's object decisions around its store, with no I/O: create, seal, free, spill, restore.

The store (object_store.py) keeps the accounting; this keeps what happens around it
while bytes move: which client is writing which object (a writer that goes away before
sealing gives its room back), which spills are in flight and how many bytes they hold
(past `spill_ahead_bytes` a writer waits for them), and which files a free may delete
now (not those of an object still being copied to disk). `handle(event)` returns
effects the shell (node.py) carries out: delete or recycle files, start a spill, hand a
writer its segment, copy a spilled object back, answer.

Events and effects carry a `cause` id, as the lease table's do (lease_table.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raylite._core.node.object_store import SPILLED, Freed, ObjectStore

CREATING = "creating"


def object_cause(object_id: bytes) -> str:
    return "object-" + object_id.hex()


def untracked(object_id: bytes) -> Freed:
    """A free of files the store no longer counts: delete both copies, recycle nothing."""
    return Freed(object_id, 0, True, True)


# ------------------------------------------------------------------ events
@dataclass(slots=True)
class CreateRequested:
    """`writer` (a client's connection, opaque here) asks for room to write an object."""

    object_id: bytes
    size: int
    owner_address: str
    writer: Any
    spill_free_bytes: int | None  # free bytes in the spill directory (None: not needed)
    cause: str


@dataclass(slots=True)
class Sealed:
    object_id: bytes
    size: int
    owner_address: str
    copy: bool
    cause: str
    fallback: bool = False  # its path links to a file on disk (an object larger than the store)


@dataclass(slots=True)
class FreeRequested:
    object_ids: list[bytes]
    cause: str


@dataclass(slots=True)
class WriterGone:
    """A writer's connection closed: objects it never sealed give their room back."""

    writer: Any
    cause: str


@dataclass(slots=True)
class OwnerGone:
    """An owner exited: no one can resolve its objects any more (refs go through the owner)."""

    owner_address: str
    cause: str


@dataclass(slots=True)
class SpillFinished:
    """A spill's copy ended: ok, failed (False), or raised (None: only the bookkeeping ends)."""

    object_id: bytes
    ok: bool | None
    cause: str


@dataclass(slots=True)
class RestoreRequested:
    """Bring a spilled object back (no spill or restore of it is in flight: the shell waited)."""

    object_id: bytes
    spill_free_bytes: int | None
    cause: str


@dataclass(slots=True)
class RestoreFinished:
    object_id: bytes
    ok: bool
    cause: str


Event = (CreateRequested | Sealed | FreeRequested | WriterGone | OwnerGone | SpillFinished | RestoreRequested
         | RestoreFinished)


# ------------------------------------------------------------------ effects
@dataclass(slots=True)
class Answer:
    """Answer the request: ok, or the error that says why not."""

    ok: bool
    error: str
    cause: str


@dataclass(slots=True)
class WatchWriter:
    """The first object this writer writes: tell the table (WriterGone) when its link closes."""

    writer: Any
    cause: str


@dataclass(slots=True)
class ReleaseFiles:
    """Recycle or delete the files of these freed objects."""

    freed: list[Freed]
    cause: str


@dataclass(slots=True)
class DropPoolFiles:
    paths: list[str]
    cause: str


@dataclass(slots=True)
class StartSpill:
    """Copy this object to disk in the background (then SpillFinished)."""

    object_id: bytes
    cause: str


@dataclass(slots=True)
class TakeSegment:
    """Give the writer its segment (`reuse`: a recycled file, or "" for a new one), after this
    event's spills if `after_spills` (too many bytes are being spilled already); then Answer ok."""

    object_id: bytes
    reuse: str
    after_spills: bool
    cause: str
    fallback: bool = False  # larger than the store: make its file on disk and link it


@dataclass(slots=True)
class CopyBack:
    """Copy a spilled object back into shared memory (after this event's spills if
    `after_spills`), then RestoreFinished."""

    object_id: bytes
    reuse: str
    after_spills: bool
    cause: str


@dataclass(slots=True)
class SpillFailed:
    object_id: bytes
    cause: str


Effect = (Answer | WatchWriter | ReleaseFiles | DropPoolFiles | StartSpill | TakeSegment | CopyBack
          | SpillFailed)


class ObjectPlane:
    def __init__(self, store: ObjectStore, *, spill_ahead_bytes: int) -> None:
        self.store = store
        self.spill_ahead_bytes = spill_ahead_bytes
        self.spilling: dict[bytes, int] = {}  # object id -> its size, copy to disk in flight
        self.spill_inflight_bytes = 0
        self.writers: dict[bytes, Any] = {}  # object reserved, not sealed -> its writer
        self._writing: dict[int, set[bytes]] = {}  # id(writer) -> objects it reserved, not sealed
        self._handlers: dict[type, Callable[[Any], list[Effect]]] = {
            CreateRequested: self._create, Sealed: self._sealed, FreeRequested: self._free,
            WriterGone: self._writer_gone, OwnerGone: self._owner_gone, SpillFinished: self._spill_finished,
            RestoreRequested: self._restore, RestoreFinished: self._restore_finished,
        }

    def handle(self, event: Event) -> list[Effect]:
        return self._handlers[type(event)](event)

    # ------------------------------------------------------------ writing
    def _create(self, e: CreateRequested) -> list[Effect]:
        """Room for a new object: spill LRU objects if needed, hand over a warm segment."""
        try:
            res = self.store.reserve(e.object_id, e.size, e.owner_address, spill_free_bytes=e.spill_free_bytes)
        except Exception as exc:  # noqa: BLE001  ObjectStoreFullError
            return [Answer(False, str(exc), e.cause)]
        effects: list[Effect] = []
        writing = self._writing.get(id(e.writer))
        if writing is None:
            writing = self._writing[id(e.writer)] = set()
            effects.append(WatchWriter(e.writer, e.cause))
        writing.add(e.object_id)
        self.writers[e.object_id] = e.writer
        effects += self._make_room(res.evict, res.drop_pool, res.spill, e.cause)
        effects.append(TakeSegment(e.object_id, res.reuse, bool(res.spill) and self._too_much_in_flight(), e.cause,
                                   res.fallback))
        return effects

    def _make_room(self, evict: list[Freed], drop_pool: list[str], spill: list[bytes], cause: str) -> list[Effect]:
        """Copies of remote objects give their room up (their primaries live on other nodes),
        recycled segments go, victims start their copies to disk."""
        effects: list[Effect] = []
        if evict:
            effects.append(ReleaseFiles(list(evict), cause))
        if drop_pool:
            effects.append(DropPoolFiles(list(drop_pool), cause))
        for oid in spill:
            size = self.store.objects[oid].size
            self.spilling[oid] = size
            self.spill_inflight_bytes += size
            effects.append(StartSpill(oid, cause))
        return effects

    def _too_much_in_flight(self) -> bool:
        """Whoever needed room may go on while the bytes being spilled stay under
        `spill_ahead_bytes` (memory runs over the capacity by at most that much, briefly)."""
        return self.spill_inflight_bytes > self.spill_ahead_bytes

    def _sealed(self, e: Sealed) -> list[Effect]:
        self.store.sealed(e.object_id, e.size, e.owner_address, copy=e.copy, fallback=e.fallback)
        self._written(e.object_id)
        return []

    def _written(self, oid: bytes) -> None:
        writer = self.writers.pop(oid, None)
        if writer is not None:
            self._writing.get(id(writer), set()).discard(oid)

    def _writer_gone(self, e: WriterGone) -> list[Effect]:
        """Objects it was writing and never sealed (it crashed mid-write): their room comes back."""
        creating = []
        for oid in self._writing.pop(id(e.writer), set()):
            self.writers.pop(oid, None)
            obj = self.store.objects.get(oid)
            if obj is not None and obj.state == CREATING:
                creating.append(oid)
        return self._free(FreeRequested(creating, e.cause)) if creating else []

    # ------------------------------------------------------------ freeing
    def _free(self, e: FreeRequested) -> list[Effect]:
        freed: list[Freed] = []
        for oid in e.object_ids:
            if oid in self.writers:
                self._written(oid)
            gone = self.store.free(oid)
            if gone is None:
                freed.append(untracked(oid))  # pulled copies, old writers
            elif oid not in self.spilling:  # a spill in flight cleans up when it ends
                freed.append(gone)
        return [ReleaseFiles(freed, e.cause)] if freed else []

    def _owner_gone(self, e: OwnerGone) -> list[Effect]:
        """Their memory and spill files are freed now rather than at session end."""
        freed: list[Freed] = []
        for oid in [oid for oid, o in self.store.objects.items() if o.owner_address == e.owner_address]:
            gone = self.store.free(oid)
            if gone is not None and oid not in self.spilling:
                freed.append(gone)
        return [ReleaseFiles(freed, e.cause)] if freed else []

    # ------------------------------------------------------------ spilling and restoring
    def _spill_finished(self, e: SpillFinished) -> list[Effect]:
        effects: list[Effect] = []
        if e.ok is not None:
            if not self.store.spill_done(e.object_id, e.ok):  # freed while it was copied
                effects.append(ReleaseFiles([untracked(e.object_id)], e.cause))
            elif not e.ok:
                effects.append(SpillFailed(e.object_id, e.cause))
        self.spill_inflight_bytes -= self.spilling.pop(e.object_id, 0)
        return effects

    def _restore(self, e: RestoreRequested) -> list[Effect]:
        obj = self.store.objects.get(e.object_id)
        if obj is None:
            return [Answer(False, "this node's store no longer has it", e.cause)]
        if obj.state != SPILLED:
            self.store.accessed(e.object_id)
            return [Answer(True, "", e.cause)]
        try:
            res = self.store.restore(e.object_id, spill_free_bytes=e.spill_free_bytes)
        except Exception as exc:  # noqa: BLE001  ObjectStoreFullError
            return [Answer(False, str(exc), e.cause)]
        assert res is not None  # it is spilled
        effects = self._make_room(res.evict, res.drop_pool, res.spill, e.cause)
        effects.append(CopyBack(e.object_id, res.reuse, self._too_much_in_flight(), e.cause))
        return effects

    def _restore_finished(self, e: RestoreFinished) -> list[Effect]:
        self.store.restore_done(e.object_id, e.ok)
        effects: list[Effect] = []
        if e.object_id not in self.store.objects:  # freed while restoring
            effects.append(ReleaseFiles([untracked(e.object_id)], e.cause))
        error = "" if e.ok else "restoring it from the spill directory failed"
        return effects + [Answer(e.ok, error, e.cause)]
