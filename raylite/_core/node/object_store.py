"""The node's object store bookkeeping: capacity, LRU spilling, recycled segments. Pure.

Objects above the inline threshold live one file per object under
/dev/shm/raylite_<session>_<node>/<hex>. Writers ask the node for room first
(`reserve`), write the file, and report it sealed; readers map it read-only.
This module decides; the node daemon (node.py) carries out the file moves it
returns, so every rule here is tested with plain calls (tests/unit).

Object lifecycle (one line per object)::

    CREATING -> SHM [-> SPILLING -> SPILLED -> RESTORING -> SHM]* -> freed

Memory: `used_bytes` counts objects whose bytes are (or are about to be) in
shared memory; `pool_bytes` counts recycled segment files, already faulted in,
kept so the next `put()` of a similar size writes into warm pages instead of
paying a page fault per 4 KiB. `mapped_bytes` counts the sealed objects some
reader on this node maps now: their pages cannot be given back while it does
(spilling them would copy them to disk and free nothing), so like Ray's objects
pinned by a get() they do not count against the capacity. used - mapped + pool
stays within `capacity_bytes`, except transiently while spills are in flight.

Spilling: when a reservation does not fit, least-recently-used sealed objects no
reader maps are spilled to `spill_dir`. An object whose last reader lets go
counts as just used, and counts against the capacity again. If the spill space
cannot take the victims either, `reserve` raises ObjectStoreFullError with the
numbers.

Objects larger than the whole store (Ray's fallback allocation): such an object cannot fit
however much is spilled, so it is written straight to a file in `spill_dir` (on disk),
which the object's shared-memory path links to; writers and readers open that path as
for any object. It counts against neither the capacity nor the spill space's accounting
(the disk's free space is checked when it is made), is never spilled, and its file goes
when it is freed. Ray puts such objects on disk the same way instead of refusing them.

Every decision is bounded by the work it does, not by the number of objects held:
sealed objects sit in recency order (an OrderedDict per kind), split by whether a
reader maps them, so choosing victims walks only the victims; readers report the
objects they map and unmap (`mapped`/`unmapped`), so nothing probes files here.
Recycled segments are found by exact size first, and dropped oldest first.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from raylite._core.clock import Clock, MonotonicClock
from raylite._core.protocol import BUSY_NOT_FULL
from raylite.exceptions import ObjectStoreFullError

CREATING = "creating"
SHM = "shm"
SPILLING = "spilling"
SPILLED = "spilled"
RESTORING = "restoring"

_MIB = 1 << 20



def default_capacity_bytes(fraction: float, shm_dir: str = "/dev/shm") -> int:
    """`fraction` of the smaller of RAM and the shared-memory filesystem (Ray uses 30%)."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        st = os.statvfs(shm_dir)
        sizes.append(st.f_frsize * st.f_blocks)
    except OSError:
        pass
    base = min(sizes) if sizes else 8 << 30
    return max(64 * _MIB, int(base * fraction))


@dataclass
class StoredObject:
    size: int
    owner_address: str
    state: str = SHM
    copy: bool = False  # pulled from another node: dropped (not spilled) when room is needed
    readers: int = 0  # clients on this node that map it now (as they report it)
    fallback: bool = False  # larger than the store: its bytes live in a file on disk (see above)


class _Recency:
    """Sealed objects in shared memory, least recently used first, in two queues: those no
    reader maps (taken first when room is needed) and those some reader maps."""

    __slots__ = ("idle", "mapped")

    def __init__(self) -> None:
        self.idle: OrderedDict[bytes, None] = OrderedDict()
        self.mapped: OrderedDict[bytes, None] = OrderedDict()

    def add(self, oid: bytes, mapped: bool) -> None:
        (self.mapped if mapped else self.idle)[oid] = None

    def touch(self, oid: bytes) -> None:
        if oid in self.idle:
            self.idle.move_to_end(oid)
        elif oid in self.mapped:
            self.mapped.move_to_end(oid)

    def remove(self, oid: bytes) -> None:
        self.idle.pop(oid, None)
        self.mapped.pop(oid, None)

    def set_mapped(self, oid: bytes, mapped: bool) -> None:
        src, dst = (self.idle, self.mapped) if mapped else (self.mapped, self.idle)
        if oid in src:
            del src[oid]
            dst[oid] = None

    def order(self) -> Iterator[bytes]:
        """Least recently used first, unmapped before mapped; do not change it while iterating."""
        yield from self.idle
        yield from self.mapped


@dataclass
class Reservation:
    """What the node must do before the writer may write `object_id`'s file.

    spill: objects to copy to disk and unlink from shared memory, in this order.
    evict: copies of remote objects given up for room (their files go, nothing is spilled).
    drop_pool: recycled segment files to delete (their room is needed).
    reuse: a recycled segment file to rename to the object's path ("" = none).
    """

    object_id: bytes
    size: int
    spill: list[bytes] = field(default_factory=list)
    evict: list[Freed] = field(default_factory=list)
    drop_pool: list[str] = field(default_factory=list)
    reuse: str = ""
    fallback: bool = False  # larger than the store: the node makes its file on disk, linked


@dataclass
class Freed:
    """What the node must do for a freed object: which files to recycle or delete."""

    object_id: bytes
    size: int
    shm: bool  # its shared-memory file exists (recycle it, or unlink it)
    spill_file: bool  # its spill file exists (delete it)
    fallback: bool = False  # its path links to a file on disk: delete both, recycle nothing


class ObjectStore:
    def __init__(self, directory: str, capacity_bytes: int, *, spill_dir: str = "",
                 spill_capacity_bytes: int = 0, pool_max_bytes: int | None = None,
                 clock: Clock | None = None, spilling_enabled: bool = True) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self.directory = directory
        self.pool_dir = os.path.join(directory, "pool")
        self.spill_dir = spill_dir
        self.capacity_bytes = capacity_bytes
        self.spill_capacity_bytes = spill_capacity_bytes  # 0 = as much as the disk has free
        # Ray's automatic_object_spilling_enabled=False: a full store refuses instead of spilling
        self.spilling_enabled = spilling_enabled
        self.pool_max_bytes = capacity_bytes // 4 if pool_max_bytes is None else pool_max_bytes
        self.objects: dict[bytes, StoredObject] = {}
        self._primaries = _Recency()  # sealed objects written here (spilled when room is needed)
        self._copies = _Recency()  # sealed copies of other nodes' objects (dropped first)
        self.used_bytes = 0
        self.mapped_bytes = 0
        self.spilled_bytes = 0
        self.fallback_bytes = 0  # objects larger than the store, on disk (not in used_bytes)
        self.pool: OrderedDict[str, int] = OrderedDict()  # recycled segment path -> size, oldest first
        self._pool_since: dict[str, float] = {}  # when it was recycled
        self._pool_by_size: dict[int, dict[str, None]] = {}  # size -> paths of that size
        self.pool_bytes = 0
        self._pool_seq = 0
        # statistics, for list_objects and the benchmarks
        self.num_spilled = 0
        self.num_restored = 0
        self.bytes_spilled_total = 0
        self.bytes_restored_total = 0

    # ------------------------------------------------------------ paths
    def path(self, object_id: bytes) -> str:
        return os.path.join(self.directory, object_id.hex())

    def spill_path(self, object_id: bytes) -> str:
        return os.path.join(self.spill_dir, object_id.hex())

    def fallback_path(self, object_id: bytes) -> str:
        """Where an object larger than the store keeps its bytes (its path links here)."""
        return os.path.join(self.spill_dir, object_id.hex() + ".fallback")

    def _recency(self, obj: StoredObject) -> _Recency:
        return self._copies if obj.copy else self._primaries

    def _now_in_memory(self, object_id: bytes, obj: StoredObject) -> None:
        """The object became sealed in shared memory (written, restored, or its spill failed)."""
        obj.state = SHM
        self._recency(obj).add(object_id, obj.readers > 0)
        if obj.readers > 0:
            self.mapped_bytes += obj.size

    def _leave_memory(self, object_id: bytes, obj: StoredObject, state: str) -> None:
        self._recency(obj).remove(object_id)
        if obj.readers > 0:
            self.mapped_bytes -= obj.size
        obj.state = state

    def load_bytes(self) -> int:
        """What counts against the capacity: objects no reader maps, and recycled segments."""
        return self.used_bytes - self.mapped_bytes + self.pool_bytes

    def fits(self, size: int) -> bool:
        """A new object of `size` bytes fits without spilling or dropping anything."""
        return self.load_bytes() + size <= self.capacity_bytes

    # ------------------------------------------------------------ readers
    def mapped(self, object_id: bytes) -> None:
        """A client on this node maps the object now: spill it only when nothing else is left."""
        obj = self.objects.get(object_id)
        if obj is not None:
            obj.readers += 1
            if obj.readers == 1 and obj.state == SHM and not obj.fallback:
                self._recency(obj).set_mapped(object_id, True)
                self.mapped_bytes += obj.size

    def unmapped(self, object_id: bytes) -> None:
        obj = self.objects.get(object_id)
        if obj is not None and obj.readers > 0:
            obj.readers -= 1
            if obj.readers == 0 and obj.state == SHM and not obj.fallback:
                self._recency(obj).set_mapped(object_id, False)
                self.mapped_bytes -= obj.size

    # ------------------------------------------------------------ writing
    def reserve(self, object_id: bytes, size: int, owner_address: str, *,
                spill_free_bytes: int | None = None) -> Reservation:
        """Make room for a new object of `size` bytes (state CREATING).

        spill_free_bytes: free space in the spill directory (None = unknown, unlimited).
        Raises ObjectStoreFullError when neither memory nor spill space can take it.
        """
        existing = self.objects.get(object_id)
        if existing is not None:  # a retried write of the same object: nothing new to hold
            self._recency(existing).touch(object_id)
            return Reservation(object_id, 0, fallback=existing.fallback)
        if size > self.capacity_bytes and self.spill_dir:
            return self._reserve_fallback(object_id, size, owner_address, spill_free_bytes)
        res = self._make_room(object_id, size, spill_free_bytes, what="store")
        self.objects[object_id] = StoredObject(size, owner_address, CREATING)
        self.used_bytes += size
        res.reuse = self._take_pool_file(size)
        return res

    def _reserve_fallback(self, object_id: bytes, size: int, owner_address: str,
                          spill_free_bytes: int | None) -> Reservation:
        """An object larger than the whole store goes to a file on disk (see the module's
        docstring), if the disk has room for it."""
        room = self._spill_room(spill_free_bytes)
        if room is not None and size > room:
            raise self._full_error(object_id, size, "store",
                                   f"it is larger than the whole store, and the spill space ({self.spill_dir}) "
                                   f"has only {_mib(room)} left to hold it on disk")
        self.objects[object_id] = StoredObject(size, owner_address, CREATING, fallback=True)
        self.fallback_bytes += size
        return Reservation(object_id, size, fallback=True)

    def _make_room(self, object_id: bytes, size: int, spill_free_bytes: int | None, what: str,
                   extra_spill_room: int = 0) -> Reservation:
        res = Reservation(object_id, size)
        # a recycled segment of this exact size becomes the object's own pages (see reserve)
        keep = self._exact_pool_file(size)
        over = self.load_bytes() + size - (self.pool[keep] if keep else 0) - self.capacity_bytes
        if over <= 0:
            return res
        # first give back the other recycled segments, oldest first
        while over > 0:
            path = next((p for p in self.pool if p != keep), None)
            if path is None:
                break
            over -= self.pool[path]
            res.drop_pool.append(path)
            self._drop_pool_file(path)
        if over <= 0:
            return res
        if size > self.capacity_bytes:
            raise self._full_error(object_id, size, what, "it is larger than the whole store")
        res.evict = self._evict_copies(over)
        over -= sum(f.size for f in res.evict)
        if over <= 0:
            return res
        if not self.spilling_enabled:
            raise self._full_error(object_id, size, what,
                                   "automatic spilling is off (_system_config automatic_object_spilling_enabled"
                                   "=False), so no sealed object may leave memory for it")
        victims = self._spill_candidates(over)
        freed = sum(self.objects[v].size for v in victims)
        if freed < over:
            raise self._full_error(object_id, size, what,
                                   f"only {_mib(freed)} of sealed objects could be spilled; the rest "
                                   f"{BUSY_NOT_FULL}")
        room = self._spill_room(spill_free_bytes)
        if room is not None:
            room += extra_spill_room
        if room is not None and freed > room:
            raise self._full_error(object_id, size, what,
                                   f"spilling needs {_mib(freed)} but the spill space has only {_mib(room)} "
                                   f"left ({self.spill_dir})")
        for v in victims:
            self._leave_memory(v, self.objects[v], SPILLING)
        res.spill = victims
        return res

    def _evict_copies(self, need: int) -> list[Freed]:
        """Drop least-recently-used copies of remote objects no reader maps, for `need` bytes."""
        chosen: list[bytes] = []
        got = 0
        for oid in self._copies.idle:
            if got >= need:
                break
            chosen.append(oid)
            got += self.objects[oid].size
        return [f for f in map(self.free, chosen) if f is not None]

    def _spill_candidates(self, need: int) -> list[bytes]:
        """Least-recently-used sealed objects no reader maps, worth `need` bytes; walks only
        as far as it takes, unless there is not enough to spill at all."""
        out: list[bytes] = []
        got = 0
        for oid in self._primaries.idle:
            if got >= need:
                break
            out.append(oid)
            got += self.objects[oid].size
        return out

    def _spill_room(self, spill_free_bytes: int | None) -> int | None:
        rooms = []
        if self.spill_capacity_bytes:
            rooms.append(max(0, self.spill_capacity_bytes - self.spilled_bytes - self.fallback_bytes))
        if spill_free_bytes is not None:
            rooms.append(spill_free_bytes)
        return min(rooms) if rooms else None

    def _full_error(self, object_id: bytes, size: int, what: str, why: str) -> ObjectStoreFullError:
        verb = "store" if what == "store" else "restore"
        limit = f"limit {_mib(self.spill_capacity_bytes)}" if self.spill_capacity_bytes else "no limit"
        return ObjectStoreFullError(
            f"Cannot {verb} object {object_id.hex()} ({_mib(size)}): the object store is full and {why}. "
            f"Store: {_mib(self.used_bytes)} used of {_mib(self.capacity_bytes)} in {len(self.objects)} "
            f"objects; spilled: {_mib(self.spilled_bytes)} ({limit}). Drop references you no longer need "
            "(del ref), raise object_store_memory in raylite.init() / `raylite start`, or free disk "
            "space in the spill directory.")

    def sealed(self, object_id: bytes, size: int, owner_address: str, *, copy: bool = False,
               fallback: bool = False) -> None:
        """The writer finished the file. Objects written without a reservation are counted now.
        `fallback`: such an object's path links to a file on disk (a pulled copy larger than
        the store, written under a reservation of another id, then renamed)."""
        obj = self.objects.get(object_id)
        if obj is None and fallback:
            self.objects[object_id] = StoredObject(size, owner_address, SHM, copy=copy, fallback=True)
            self.fallback_bytes += size
            return
        if obj is not None and obj.fallback:
            if obj.state == CREATING:
                self.fallback_bytes += size - obj.size
                obj.size = size
                obj.state = SHM
                if owner_address:
                    obj.owner_address = owner_address
            return
        if obj is None:
            obj = self.objects[object_id] = StoredObject(size, owner_address, CREATING, copy=copy)
            self.used_bytes += size
            self._now_in_memory(object_id, obj)
        elif obj.state == CREATING:
            if size != obj.size:
                self.used_bytes += size - obj.size
                obj.size = size
            if owner_address:
                obj.owner_address = owner_address
            self._now_in_memory(object_id, obj)
        else:
            self._recency(obj).touch(object_id)

    def accessed(self, object_id: bytes) -> None:
        obj = self.objects.get(object_id)
        if obj is not None:
            self._recency(obj).touch(object_id)

    # ------------------------------------------------------------ spilling
    def spill_done(self, object_id: bytes, ok: bool) -> bool:
        """The node copied the object to disk (ok) or failed to; False if it was freed meanwhile."""
        obj = self.objects.get(object_id)
        if obj is None or obj.state != SPILLING:
            return False
        if ok:
            obj.state = SPILLED
            self.used_bytes -= obj.size
            self.spilled_bytes += obj.size
            self.num_spilled += 1
            self.bytes_spilled_total += obj.size
        else:
            self._now_in_memory(object_id, obj)
        return True

    def restore(self, object_id: bytes, *, spill_free_bytes: int | None = None) -> Reservation | None:
        """Room to bring a spilled object back; None if it is not spilled (nothing to do)."""
        obj = self.objects.get(object_id)
        if obj is None or obj.state != SPILLED:
            return None
        # its own spill file goes once it is back, so its bytes count as spill room
        res = self._make_room(object_id, obj.size, spill_free_bytes, what="restore",
                              extra_spill_room=obj.size)
        obj.state = RESTORING
        self.used_bytes += obj.size
        res.reuse = self._take_pool_file(obj.size)
        return res

    def restore_done(self, object_id: bytes, ok: bool) -> None:
        obj = self.objects.get(object_id)
        if obj is None or obj.state != RESTORING:
            return
        if ok:
            self.spilled_bytes -= obj.size
            self.num_restored += 1
            self.bytes_restored_total += obj.size
            self._now_in_memory(object_id, obj)
        else:
            obj.state = SPILLED
            self.used_bytes -= obj.size

    # ------------------------------------------------------------ freeing
    def free(self, object_id: bytes) -> Freed | None:
        obj = self.objects.pop(object_id, None)
        if obj is None:
            return None
        if obj.fallback:
            self.fallback_bytes -= obj.size
            return Freed(object_id, obj.size, True, False, fallback=True)
        if obj.state == SHM:
            self._leave_memory(object_id, obj, SHM)
        in_shm = obj.state != SPILLED
        if in_shm:
            self.used_bytes -= obj.size
        if obj.state in (SPILLED, RESTORING):
            self.spilled_bytes -= obj.size
        return Freed(object_id, obj.size, in_shm, obj.state in (SPILLED, RESTORING, SPILLING))

    # ------------------------------------------------------------ recycled segments
    def offer_pool_file(self, size: int) -> str:
        """A freed, unmapped segment of `size` bytes: the path to keep it under, or "" to delete it."""
        if size <= 0 or self.pool_bytes + size > self.pool_max_bytes:
            return ""
        if not self.fits(size):
            return ""
        self._pool_seq += 1
        path = os.path.join(self.pool_dir, f"seg{self._pool_seq}")
        self.pool[path] = size
        self._pool_since[path] = self.clock.monotonic()
        self._pool_by_size.setdefault(size, {})[path] = None
        self.pool_bytes += size
        return path

    def _exact_pool_file(self, size: int) -> str:
        same = self._pool_by_size.get(size)
        return next(iter(same)) if same else ""

    def _take_pool_file(self, size: int) -> str:
        """A recycled segment for an object of `size`: the same size if one is kept, else the
        closest among the oldest few (a bounded look, however many segments are kept)."""
        if not self.pool:
            return ""
        path = self._exact_pool_file(size)
        if not path:
            nearby = [p for _, p in zip(range(_POOL_LOOK), self.pool)]
            path = min(nearby, key=lambda p: abs(self.pool[p] - size))
            if self.pool[path] < size // 2:
                return ""  # mostly fresh pages anyway; keep it for a smaller object
        self._drop_pool_file(path)
        return path

    def _drop_pool_file(self, path: str) -> None:
        size = self.pool.pop(path, None)
        if size is None:
            return
        self.pool_bytes -= size
        self._pool_since.pop(path, None)
        same = self._pool_by_size.get(size)
        if same is not None:
            same.pop(path, None)
            if not same:
                del self._pool_by_size[size]

    def forget_pool_file(self, path: str) -> None:
        """A segment offered to the pool could not be moved there: it is not kept."""
        self._drop_pool_file(path)

    def trim_pool(self, idle_s: float) -> list[str]:
        """Recycled segments nobody reused for `idle_s`: give their memory back (paths to delete).

        The pool makes a busy put() loop fast; an idle node should not sit on that memory."""
        now = self.clock.monotonic()
        old = []
        for p in self.pool:  # oldest first: stop at the first one still young
            if now - self._pool_since[p] < idle_s:
                break
            old.append(p)
        for p in old:
            self._drop_pool_file(p)
        return old

    # ------------------------------------------------------------ listing
    def where(self, object_id: bytes) -> str:
        obj = self.objects.get(object_id)
        return "" if obj is None else ("spilled" if obj.state in (SPILLED, RESTORING) else "shared_memory")

    def listing(self) -> list[list[object]]:
        return [[oid, o.size, o.owner_address, self.where(oid)] for oid, o in self.objects.items()]

    def stats(self) -> dict[str, int]:
        return {"used_bytes": self.used_bytes, "capacity_bytes": self.capacity_bytes,
                "mapped_bytes": self.mapped_bytes,
                "spilled_bytes": self.spilled_bytes, "pool_bytes": self.pool_bytes,
                "fallback_bytes": self.fallback_bytes,
                "num_objects": len(self.objects), "num_spilled": self.num_spilled,
                "num_restored": self.num_restored, "bytes_spilled_total": self.bytes_spilled_total,
                "bytes_restored_total": self.bytes_restored_total}


_POOL_LOOK = 64  # recycled segments compared when none has the exact size


def _mib(n: int) -> str:
    return f"{n / _MIB:.1f} MiB"
