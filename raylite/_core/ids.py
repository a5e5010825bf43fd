"""Identifiers: frozen byte strings with a type, so signatures say what they carry.

Each id is a ``bytes`` subclass: hashable, cheap, msgpack-able as-is, and `.hex()`
gives the printable form. An ObjectID for a task return is the TaskID plus a
4-byte return index, so the task that made an object is known from its id.
"""

from __future__ import annotations

import os
import struct


class BaseID(bytes):
    SIZE = 16

    @classmethod
    def from_random(cls):
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def from_hex(cls, text: str):
        return cls(bytes.fromhex(text))

    @classmethod
    def nil(cls):
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


class TaskID(BaseID):
    SIZE = 16


class PlacementGroupID(BaseID):
    SIZE = 16


class ObjectID(BaseID):
    """TaskID (16 bytes) + return index (4 bytes, big endian)."""

    SIZE = 20

    @classmethod
    def for_return(cls, task_id: bytes, index: int) -> ObjectID:
        return cls(task_id + struct.pack(">I", index))

    @classmethod
    def for_put(cls) -> ObjectID:
        return cls(os.urandom(16) + b"\xff\xff\xff\xff")

    def task_id(self) -> TaskID:
        return TaskID(self[:16])

    def return_index(self) -> int:
        return struct.unpack(">I", self[16:])[0]
