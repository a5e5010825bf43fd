"""Owner-side reference counts and borrower-side borrow records. Pure: no sockets.

An object is freed when, at its owner, no local ObjectRef exists, no submitted
task still uses it as an argument, no borrower holds it and no owned object
contains it. A borrower (a process holding a ref it does not own) is
registered with the owner, and unregisters when its own count drops to zero.

Every method returns what the I/O shell must do next: object ids to free, or
(owner address, object id) pairs to un-borrow.

Lineage: the owner also keeps, for each object a task returned, the spec of that task, so
that a value lost with its node can be rebuilt by running the task again. A lineage record
lives while its object is referenced, and also while the lineage of a live object needs it as
an argument (its value may be long freed: it is rebuilt first, recursively, if needed).
"""

from __future__ import annotations

_NOBODY: frozenset = frozenset()


class RefCount:
    """Counts for one object. One exists per pending task return, so it has slots and shares
    empty borrower and contents collections until it gets some."""

    __slots__ = ("owned", "owner_address", "local", "submitted", "contained", "borrowers", "registered",
                 "contains")

    def __init__(self, owned: bool, owner_address: str = "") -> None:
        self.owned = owned
        self.owner_address = owner_address
        self.local = 0
        self.submitted = 0
        self.contained = 0  # owned (or borrowed) outer objects holding this ref
        self.borrowers: set | frozenset = _NOBODY
        self.registered = False  # borrower side: the owner knows about us
        self.contains: list | tuple = ()  # inner refs: [(object_id, owner_address)]

    def in_use(self) -> bool:
        return bool(self.local or self.submitted or self.contained or self.borrowers)

    def add_borrower(self, borrower: str) -> None:
        if not self.borrowers:
            self.borrowers = set()
        self.borrowers.add(borrower)  # type: ignore[union-attr]

    def discard_borrower(self, borrower: str) -> None:
        if borrower in self.borrowers:
            self.borrowers.discard(borrower)  # type: ignore[union-attr]


class Lineage:
    """How to make an owned object again: the task spec that returned it (opaque here)."""

    __slots__ = ("spec", "arg_ids", "reruns", "pins", "released", "cancelled", "generator_items")

    def __init__(self, spec: object, arg_ids: list | tuple) -> None:
        self.spec = spec
        self.arg_ids = arg_ids  # owned objects the task takes as arguments (their lineage is kept too)
        self.reruns = 0  # times the task was re-run to rebuild a lost return
        self.pins = 0  # lineage records of other objects that list this object as an argument
        self.released = False  # no ref to the object is left; the record stays only for `pins`
        self.cancelled = False  # ray.cancel() reached its task: a lost return is not rebuilt
        self.generator_items = 0  # a dynamic generator's: items up to its last stored one


class ReferenceCounter:
    def __init__(self, my_address: str) -> None:
        self.my_address = my_address
        self.refs: dict[bytes, RefCount] = {}
        self.lineage: dict[bytes, Lineage] = {}

    # -- lineage
    def record_lineage(self, return_ids: list[bytes], spec: object, arg_ids: list[bytes]) -> None:
        """Owned `return_ids` were made by the task `spec` taking the objects `arg_ids`."""
        args = [a for a in arg_ids if a in self.lineage] if arg_ids else ()
        for oid in return_ids:
            self.lineage[oid] = Lineage(spec, args)
            for a in args:
                self.lineage[a].pins += 1

    def lineage_of(self, object_id: bytes) -> Lineage | None:
        return self.lineage.get(object_id)

    def _drop_lineage(self, object_id: bytes) -> None:
        """The object is no longer referenced: drop its lineage unless another's needs it."""
        stack = [object_id]
        first = True
        while stack:
            oid = stack.pop()
            lin = self.lineage.get(oid)
            if lin is None:
                continue
            if first:
                lin.released = True
                first = False
            elif lin.pins > 0:
                lin.pins -= 1
            if lin.pins > 0 or not lin.released:
                continue
            del self.lineage[oid]
            stack.extend(lin.arg_ids)

    # -- creation
    def own(self, object_id: bytes) -> None:
        rc = self.refs.get(object_id)
        if rc is None:
            self.refs[object_id] = RefCount(True, self.my_address)
        else:
            rc.owned = True

    def is_owned(self, object_id: bytes) -> bool:
        rc = self.refs.get(object_id)
        return rc is not None and rc.owned

    def borrow(self, object_id: bytes, owner_address: str) -> bool:
        """Note a borrowed ref; True if the owner must be told (first time)."""
        rc = self.refs.get(object_id)
        if rc is None:
            rc = self.refs[object_id] = RefCount(owner_address == self.my_address, owner_address)
        if rc.owned or rc.registered:
            return False
        rc.registered = True
        return True

    # -- counting
    def add_local(self, object_id: bytes, owner_address: str) -> None:
        rc = self.refs.get(object_id)
        if rc is None:
            rc = self.refs[object_id] = RefCount(owner_address == self.my_address, owner_address)
        rc.local += 1

    def remove_local(self, object_id: bytes) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        rc = self.refs.get(object_id)
        if rc is None:
            return [], []
        rc.local -= 1
        return self._maybe_release(object_id)

    def add_submitted(self, object_ids: list[bytes]) -> None:
        for oid in object_ids:
            rc = self.refs.get(oid)
            if rc is not None:
                rc.submitted += 1

    def remove_submitted(self, object_ids: list[bytes]) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        free: list[bytes] = []
        unborrow: list[tuple[str, bytes]] = []
        for oid in object_ids:
            rc = self.refs.get(oid)
            if rc is None:
                continue
            rc.submitted -= 1
            f, u = self._maybe_release(oid)
            free += f
            unborrow += u
        return free, unborrow

    def add_contained(self, outer: bytes, inner: list[tuple[bytes, str]]) -> None:
        rc = self.refs.get(outer)
        if rc is None:
            return
        rc.contains = [*rc.contains, *inner]
        for oid, owner in inner:
            irc = self.refs.get(oid)
            if irc is None:
                irc = self.refs[oid] = RefCount(owner == self.my_address, owner)
            if not irc.owned:
                irc.registered = True  # registered on our behalf by the sender (or by us earlier)
            irc.contained += 1

    def add_borrower(self, object_id: bytes, borrower: str) -> bool:
        rc = self.refs.get(object_id)
        if rc is None or not rc.owned:
            return False
        rc.add_borrower(borrower)
        return True

    def remove_borrower(self, object_id: bytes, borrower: str) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        rc = self.refs.get(object_id)
        if rc is None:
            return [], []
        rc.discard_borrower(borrower)
        return self._maybe_release(object_id)

    def drop_borrowers_at(self, address: str) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        """A borrower process died: forget its borrows."""
        free: list[bytes] = []
        unborrow: list[tuple[str, bytes]] = []
        for oid, rc in list(self.refs.items()):
            if address in rc.borrowers:
                rc.discard_borrower(address)
                f, u = self._maybe_release(oid)
                free += f
                unborrow += u
        return free, unborrow

    # -- release
    def _maybe_release(self, object_id: bytes) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        free: list[bytes] = []
        unborrow: list[tuple[str, bytes]] = []
        stack = [object_id]
        while stack:
            oid = stack.pop()
            rc = self.refs.get(oid)
            if rc is None or rc.in_use():
                continue
            del self.refs[oid]
            if oid in self.lineage:
                self._drop_lineage(oid)
            if rc.owned:
                free.append(oid)
            elif rc.registered:
                unborrow.append((rc.owner_address, oid))
            else:
                free.append(oid)  # a cached copy of a borrowed value
            for inner, _owner in rc.contains:
                irc = self.refs.get(inner)
                if irc is not None:
                    irc.contained -= 1
                    stack.append(inner)
        return free, unborrow

    def count(self, object_id: bytes) -> RefCount | None:
        return self.refs.get(object_id)
