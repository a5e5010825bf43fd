"""Values <-> bytes: cloudpickle with pickle protocol 5 out-of-band buffers.

A serialized value is a small pickle stream (`meta`) plus a list of raw buffers
(numpy arrays, Arrow buffers, tensors), so large data is written once and read
back zero-copy from shared memory. Object refs met while pickling are collected
(`contained_refs`) so the owner can count them as borrowed.

Shared-memory file layout (one object per file)::

    b"RLO1" | u32 kind | u64 meta_len | u32 nbuf | (u64 offset, u64 len) * nbuf | meta | buffers
    (each buffer starts at a 64-byte aligned offset)

Payload forms inside messages (`[object_id, kind, payload]`):
    "v": inline value, payload = [meta, [buffer bytes, ...]]
    "e": inline error (raised by get), same payload form
    "s": in a node's store, payload = [node_id, node_address, size]
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from raylite.exceptions import ObjectSerializationError

KIND_VALUE = 0
KIND_ERROR = 1
_MAGIC = b"RLO1"
_HEAD = struct.Struct("<4sIQI")
_BUF = struct.Struct("<QQ")
_ALIGN = 64

_local = threading.local()


@dataclass
class SerializedObject:
    meta: bytes
    buffers: list[pickle.PickleBuffer]
    contained_refs: list[Any] = field(default_factory=list)
    kind: int = KIND_VALUE

    def total_bytes(self) -> int:
        return len(self.meta) + sum(memoryview(b).nbytes for b in self.buffers)

    def to_inline(self) -> list:
        return [self.meta, [memoryview(b).cast("B").tobytes() if not isinstance(b, bytes) else b
                            for b in self.buffers]]


def contained_refs_sink() -> list | None:
    return getattr(_local, "refs", None)


def serialize(value: Any, *, kind: int = KIND_VALUE, what: str = "value") -> SerializedObject:
    """Pickle `value`; raise ObjectSerializationError naming the unpicklable part."""
    buffers: list[pickle.PickleBuffer] = []
    prev = getattr(_local, "refs", None)
    refs: list[Any] = []
    _local.refs = refs
    try:
        f = io.BytesIO()
        pickler = cloudpickle.CloudPickler(f, protocol=5, buffer_callback=buffers.append)
        pickler.dump(value)
        meta = f.getvalue()
    except Exception as e:  # noqa: BLE001
        raise _explain_failure(value, what, e) from e
    finally:
        _local.refs = prev
    return SerializedObject(meta, buffers, refs, kind)


def deserialize(meta: bytes | memoryview, buffers: list) -> Any:
    return pickle.loads(meta, buffers=buffers)


def from_inline(payload: list) -> Any:
    return pickle.loads(payload[0], buffers=payload[1])


# ---------------------------------------------------------------- shared-memory files
def _layout(so: SerializedObject) -> tuple[bytes, list[tuple[int, int]], int]:
    nbuf = len(so.buffers)
    header_len = _HEAD.size + _BUF.size * nbuf
    pos = header_len + len(so.meta)
    spans = []
    for b in so.buffers:
        n = memoryview(b).nbytes
        pos = (pos + _ALIGN - 1) // _ALIGN * _ALIGN
        spans.append((pos, n))
        pos += n
    header = _HEAD.pack(_MAGIC, so.kind, len(so.meta), nbuf) + b"".join(_BUF.pack(o, n) for o, n in spans)
    return header, spans, pos


def stored_size(so: SerializedObject) -> int:
    return _layout(so)[2]


def write_file(so: SerializedObject, path: str) -> int:
    """Write the object to `path` (created; must not exist). Returns its size."""
    header, spans, total = _layout(so)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        pieces: list[Any] = [header, so.meta]
        pos = len(header) + len(so.meta)
        for (off, _n), b in zip(spans, so.buffers):
            if off > pos:
                pieces.append(b"\x00" * (off - pos))
            mv = memoryview(b)
            pieces.append(mv if mv.contiguous else mv.tobytes())
            pos = off + mv.nbytes
        _writev_all(fd, pieces)
    finally:
        os.close(fd)
    return total


def _writev_all(fd: int, pieces: list) -> None:
    views = [memoryview(p).cast("B") for p in pieces if len(memoryview(p).cast("B"))]
    while views:
        batch = views[:512]
        n = os.writev(fd, batch)
        while n > 0 and views:
            first = views[0]
            if n >= len(first):
                n -= len(first)
                views.pop(0)
            else:
                views[0] = first[n:]
                n = 0


def read_file(path: str) -> tuple[int, Any]:
    """Map the object read-only and unpickle it; buffers are views into the mapping."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    magic, kind, meta_len, nbuf = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        raise ValueError(f"{path} is not a raylite object file")
    spans = [_BUF.unpack_from(view, _HEAD.size + i * _BUF.size) for i in range(nbuf)]
    start = _HEAD.size + _BUF.size * nbuf
    meta = view[start:start + meta_len]
    bufs = [view[o:o + n] for o, n in spans]
    return kind, pickle.loads(meta, buffers=bufs)


# ---------------------------------------------------------------- error messages
def _explain_failure(value: Any, what: str, err: Exception) -> ObjectSerializationError:
    path, culprit = _find_unpicklable(value, what, depth=0)
    kind = f"{type(culprit).__module__}.{type(culprit).__qualname__}"
    if kind.startswith("builtins."):
        kind = kind[len("builtins."):]
    msg = (f"Could not serialize {what}: {path} is a {kind}, which cannot be pickled ({err}). "
           "Create it inside the task or actor instead of passing it, or make the object "
           "picklable (define __reduce__ or __getstate__).")
    return ObjectSerializationError(msg)


def _picklable(obj: Any) -> bool:
    try:
        cloudpickle.dumps(obj, protocol=5, buffer_callback=lambda b: None)
        return True
    except Exception:  # noqa: BLE001
        return False


def _find_unpicklable(obj: Any, path: str, depth: int) -> tuple[str, Any]:
    if depth > 8:
        return path, obj
    children: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = [(f"attribute .{k} of {path}", v) for k, v in vars(obj).items()]
    for child_path, child in children:
        if not _picklable(child):
            return _find_unpicklable(child, child_path, depth + 1)
    return path, obj
