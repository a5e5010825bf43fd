"""Identifiers: frozen byte strings with a type, so signatures say what they carry.

Each id is a ``bytes`` subclass: hashable, cheap, msgpack-able as-is, and `.hex()`
gives the printable form. An ObjectID for a task return is the TaskID plus a
4-byte return index, so the task that made an object is known from its id.
"""

from __future__ import annotations

import itertools
import os
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self  # Python 3.11's; annotations are never evaluated here (3.10 runs too)

_pack_counter = struct.Struct(">Q").pack


class _UniqueSource:
    """Unique 16-byte values without a system call per id.

    `os.urandom` costs tens of microseconds on a busy machine, and an id is made on
    every task submission. The first 8 bytes step through a random permutation of a
    per-process counter (so any prefix of the hex form, as used in socket names, stays
    distinct); then 4 bytes random per process, and the last 4 the job the process works
    for now (`set_job`), so the job that made a task, an actor or an object is read from
    its id, as in Ray (`ObjectRef.job_id()`, `ActorID.job_id`). Forked children reseed,
    so a worker forked from the template never repeats its siblings' ids.
    """

    _STEP = 0x9E3779B97F4A7C15  # odd: counter -> offset is a bijection mod 2**64

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        seed = os.urandom(16)
        self.start = int.from_bytes(seed[:8], "big")
        self.suffix = seed[8:12] + b"\x00\x00\x00\x00"
        self.counter = itertools.count(1)

    def set_job(self, job_id: bytes) -> None:
        """Ids made from now on carry `job_id` (4 bytes) in their bytes 12 to 16."""
        if len(job_id) == 4 and self.suffix[4:] != job_id:
            self.suffix = self.suffix[:4] + bytes(job_id)

    def next16(self) -> bytes:
        head = (self.start + next(self.counter) * self._STEP) & 0xFFFFFFFFFFFFFFFF
        return _pack_counter(head) + self.suffix


_UNIQUE = _UniqueSource()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_UNIQUE.reseed)


def set_job(job_id: bytes) -> None:
    """The job this process works for now (a driver's, or a worker's current task's)."""
    _UNIQUE.set_job(job_id)


def job_of(id16: bytes) -> JobID:
    """The job recorded in a task, actor or put id (or an object id: its first 16 bytes)."""
    return JobID(id16[12:16])


class BaseID(bytes):
    SIZE = 16

    @classmethod
    def from_random(cls) -> Self:
        if cls.SIZE == 16:
            return cls(_UNIQUE.next16())
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def from_hex(cls, text: str) -> Self:
        return cls(bytes.fromhex(text))

    @classmethod
    def nil(cls) -> Self:
        return cls(b"\x00" * cls.SIZE)

    def is_nil(self) -> bool:
        return not any(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hex()})"

    def binary(self) -> bytes:
        return bytes(self)


class JobID(BaseID):
    SIZE = 4


class NodeID(BaseID):
    SIZE = 16


class WorkerID(BaseID):
    SIZE = 16


class ActorID(BaseID):
    SIZE = 16

    @property
    def job_id(self) -> JobID:
        """The job that created the actor (Ray's `ActorID.job_id`)."""
        return job_of(self)


class TaskID(BaseID):
    SIZE = 16

    def job_id(self) -> JobID:
        return job_of(self)


class PlacementGroupID(BaseID):
    SIZE = 16


class ObjectID(BaseID):
    """TaskID (16 bytes) + return index (4 bytes, big endian)."""

    SIZE = 20

    # the index of the object that stands for an actor's strong handles (client/actors.py):
    # it has no value and no user ObjectRef names it
    HANDLE_TOKEN_INDEX = 0xFFFFFFFE

    @classmethod
    def for_return(cls, task_id: bytes, index: int) -> ObjectID:
        return cls(task_id + struct.pack(">I", index))

    @classmethod
    def for_put(cls) -> ObjectID:
        return cls(_UNIQUE.next16() + b"\xff\xff\xff\xff")

    def task_id(self) -> TaskID:
        return TaskID(self[:16])

    def job_id(self) -> JobID:
        return job_of(self)

    def return_index(self) -> int:
        index: int = struct.unpack(">I", self[16:])[0]
        return index
