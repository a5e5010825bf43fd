"""ObjectRef and ObjectRefGenerator: handles to values that may not exist yet.

A ref counts itself at its process's CoreClient while it lives, so the owner
can free the value once every ref is gone. Pickling a ref (inside arguments or
values) records it, so the borrowing is counted too; unpickling it in another
process registers that process as a borrower with the owner.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import types
from typing import Any

from raylite._core.runtime import CURRENT as _CLIENT  # the current client (None before init)
from raylite._core.serialization import contained_refs_sink


class ObjectRef:
    """A reference to an object in the cluster. Hashable; `hex()` is its id."""

    __slots__ = ("_id", "_owner", "_client", "__weakref__")
    # `ObjectRef[int]` in annotations evaluated at run time (Ray's ObjectRef takes it too)
    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(self, object_id: bytes, owner_address: str = "", *, _borrowed: bool = False) -> None:
        self._id = bytes(object_id)
        self._owner = owner_address
        client = _CLIENT[0]
        self._client = client
        if client is not None:
            client.ref_created(self._id, owner_address, borrowed=_borrowed)

    @classmethod
    def counted(cls, object_id: bytes, owner_address: str, client: Any) -> ObjectRef:
        """A ref whose count `client` already took (under its lock, for many refs at once)."""
        ref = object.__new__(cls)
        ref._id = object_id
        ref._owner = owner_address
        ref._client = client
        return ref

    def __del__(self) -> None:
        client = self._client
        if client is not None:
            try:
                client.ref_deleted(self._id)
            except Exception:  # noqa: BLE001  interpreter shutdown
                pass

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self):
        from raylite._core.ids import ObjectID

        return ObjectID(self._id).task_id()

    def job_id(self):
        """The job whose task (or put) made this object, as in Ray."""
        from raylite._core.ids import job_of

        return job_of(self._id)

    def owner_address(self) -> str:
        return self._owner

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    def __reduce__(self):
        sink = contained_refs_sink()
        if sink is not None:
            sink.append(self)
        return (_rebuild_ref, (self._id, self._owner))

    def future(self) -> concurrent.futures.Future:
        """A concurrent.futures.Future that resolves to the value (or its error)."""
        client = self._client or _CLIENT[0]
        return client.future_of(self)

    def _on_completed(self, py_callback: Any) -> None:
        """Call `py_callback(value)` once the object is ready (soon, if it is already): the value,
        or the exception object its task failed with (Ray's hook, which asyncio integrations and
        Ray's tests use). The callback is dropped once called; what it raises is logged."""
        held = [py_callback]  # released after the call, not kept for the future's lifetime

        def done(fut: concurrent.futures.Future) -> None:
            callback = held.pop()
            try:
                value = fut.result()
            except BaseException as e:  # noqa: BLE001 - the task's error is the callback's value
                value = e
            try:
                callback(value)
            except Exception:  # noqa: BLE001
                logging.getLogger("raylite").exception("an ObjectRef._on_completed callback raised")

        self.future().add_done_callback(done)

    def __await__(self):
        return asyncio.wrap_future(self.future()).__await__()

    def as_future(self) -> asyncio.Future:
        return asyncio.wrap_future(self.future())


def _rebuild_ref(object_id: bytes, owner_address: str) -> ObjectRef:
    return ObjectRef(object_id, owner_address, _borrowed=True)


class ObjectRefGenerator:
    """Refs yielded by a `num_returns="streaming"` task, in order, as they are produced.

    Iterate it (sync or async) to get one ObjectRef per yielded value; the
    iteration ends when the task returns, and raises the task's error if it failed.
    The generator holds the ref to the task's own return (its completion) for as long as
    it lives, so `completed()` works whenever it is asked, before or after the task ends.
    """

    def __init__(self, task_id: bytes, client: Any, completion: ObjectRef) -> None:
        self._task_id = task_id
        self._client = client
        self._index = 0
        self._completion = completion

    def __iter__(self) -> ObjectRefGenerator:
        return self

    def __next__(self) -> ObjectRef:
        ref = self._client.next_generator_item(self._task_id, self._index, timeout=None)
        if ref is None:
            raise StopIteration
        self._index += 1
        return ref

    def __aiter__(self) -> ObjectRefGenerator:
        return self

    async def __anext__(self) -> ObjectRef:
        loop = asyncio.get_running_loop()
        ref = await loop.run_in_executor(None, self._client.next_generator_item, self._task_id, self._index, None)
        if ref is None:
            raise StopAsyncIteration
        self._index += 1
        return ref

    def completed(self) -> ObjectRef:
        """A ref that resolves (to None) when the task has returned, or raises its error."""
        return self._completion

    def __len__(self) -> int:
        return self._client.generator_length(self._task_id)

    def __del__(self) -> None:
        client = self._client
        if client is not None:
            try:
                client.generator_dropped(self._task_id)
            except Exception:  # noqa: BLE001
                pass


class DynamicObjectRefGenerator:
    """What a `num_returns="dynamic"` task's single ref resolves to: a list of refs."""

    def __init__(self, refs: list[ObjectRef]) -> None:
        self._refs = collections.deque(refs)

    def __iter__(self):
        """Each ref is handed out once, as in Ray: iterating takes it out of the generator, so a
        ref the consumer has dropped is freed at once, not when the whole generator is."""
        while self._refs:
            yield self._refs.popleft()

    def __len__(self) -> int:
        return len(self._refs)
