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

import fcntl
import io
import mmap
import os
import pickle
import struct
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from raylite._core import code_pickling
from raylite.exceptions import ObjectSerializationError

code_pickling.install()  # code pickled by value keeps its file name and lines (code_pickling.py)

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
        return [self.meta, [b if isinstance(b, bytes) else bytes(_raw(b)) for b in self.buffers]]


def contained_refs_sink() -> list | None:
    return getattr(_local, "refs", None)


_SCALARS = frozenset({int, float, bool, type(None)})
_SHORT = frozenset({str, bytes})


def serialize(value: Any, *, kind: int = KIND_VALUE, what: str = "value", arguments: bool = False) -> SerializedObject:
    """Pickle `value`; raise ObjectSerializationError naming the unpicklable part. `arguments`:
    `value` is a call's (args, kwargs), and errors name the argument."""
    t = type(value)
    if t in _SCALARS or (t in _SHORT and len(value) <= 4096):
        # nothing to export, no buffers, no refs: the standard pickler, 20x cheaper than
        # setting up cloudpickle's (a task returning 10,000 numbers pays it 10,000 times)
        return SerializedObject(pickle.dumps(value, protocol=5), [], [], kind)
    buffers: list[pickle.PickleBuffer] = []
    prev = getattr(_local, "refs", None)
    refs: list[Any] = []
    _local.refs = refs
    try:
        f = io.BytesIO()
        cls = _pickler_class()
        pickler = cls(f, protocol=5, buffer_callback=buffers.append)
        pickler.dump(value)
        meta = f.getvalue()
    except Exception as e:  # noqa: BLE001
        raise _explain_failure(value, what, e, arguments) from e
    finally:
        _local.refs = prev
    return SerializedObject(meta, buffers, refs, kind)


def deserialize(meta: bytes | memoryview, buffers: list) -> Any:
    return pickle.loads(meta, buffers=buffers)


def from_inline(payload: list) -> Any:
    return pickle.loads(payload[0], buffers=payload[1])


# ---------------------------------------------------------------- torch tensors, Arrow slices
# torch pickles a tensor's storage in-band (one copy into the pickle, one out of it).
# CPU tensors travel as numpy arrays instead, whose buffers go out of band, and come
# back as tensors over the shared-memory pages (read-only memory: writing to them fails).
# A sliced Arrow table pickles its parent's whole buffers; one much smaller than its
# buffers is compacted first (an Arrow IPC round trip writes only the rows in the slice).
_PICKLERS: dict[tuple[bool, bool], Any] = {}


def _pickler_class() -> Any:
    key = ("torch" in sys.modules, "pyarrow" in sys.modules)
    cls = _PICKLERS.get(key)
    if cls is None:
        cls = _PICKLERS[key] = _make_pickler(*key)
    return cls


def _make_pickler(with_torch: bool, with_arrow: bool) -> Any:
    if not with_torch and not with_arrow:
        return cloudpickle.CloudPickler
    tensor_type = table_types = None
    if with_torch:
        import torch

        tensor_type = torch.Tensor
    if with_arrow:
        import pyarrow

        table_types = (pyarrow.Table, pyarrow.RecordBatch)

    class RayliteCloudPickler(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            t = type(obj)
            if t is tensor_type:
                return _reduce_tensor(obj)
            if table_types is not None and t in table_types:
                compact = _compact_arrow(obj)
                if compact is not None:
                    return _same, (compact,)
            return super().reducer_override(obj)

    return RayliteCloudPickler


def _same(value: Any) -> Any:
    return value


def _compact_arrow(table: Any) -> Any:
    """A copy holding only `table`'s rows when its buffers are much larger (a slice)."""
    try:
        total = table.get_total_buffer_size()
        if total <= 2 * table.nbytes + (1 << 16):
            return None
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write(table)
        result = pa.ipc.open_stream(sink.getvalue()).read_all()
        return result if isinstance(table, pa.Table) else result.combine_chunks().to_batches()[0]
    except Exception:  # noqa: BLE001  pickle it as it is
        return None


_TORCH_VIEW_AS = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def _reduce_tensor(t: Any) -> Any:
    import torch

    if (t.device.type != "cpu" or t.requires_grad or t.layout != torch.strided or t.is_quantized
            or t.is_conj() or t.is_neg() or not t.is_contiguous() or t.nelement() * t.element_size() < 4096):
        return NotImplemented
    name = str(t.dtype).rsplit(".", 1)[-1]
    try:
        if name in _TORCH_VIEW_AS:
            arr = t.view(getattr(torch, _TORCH_VIEW_AS[name])).numpy()
        else:
            arr = t.numpy()
    except (TypeError, RuntimeError):
        return NotImplemented
    return _rebuild_tensor, (arr, name)


def _rebuild_tensor(arr: Any, dtype_name: str) -> Any:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given NumPy array is not writable": it is shared memory
        t = torch.from_numpy(arr)
    if dtype_name in _TORCH_VIEW_AS:
        t = t.view(getattr(torch, dtype_name))
    return t


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


def write_file(so: SerializedObject, path: str, *, exclusive: bool = True) -> int:
    """Write the object to `path` (created; must not exist when `exclusive`). Returns its size."""
    header, spans, total = _layout(so)
    fd = os.open(path, os.O_CREAT | (os.O_EXCL if exclusive else 0) | os.O_WRONLY, 0o600)
    try:
        pieces: list[Any] = [header, so.meta]
        pos = len(header) + len(so.meta)
        for (off, _n), b in zip(spans, so.buffers):
            if off > pos:
                pieces.append(b"\x00" * (off - pos))
            mv = memoryview(b)
            pieces.append(_raw(b))
            pos = off + mv.nbytes
        _writev_all(fd, pieces)
    finally:
        os.close(fd)
    return total


def write_into(so: SerializedObject, path: str) -> int:
    """Write the object into `path` through one shared mapping; returns its size.

    `path` may be a recycled segment (node.py renames a freed, unmapped file there):
    its pages are already allocated, and if this process wrote it before, its mapping
    is still open here (_WRITER_MAPS), so the write is a plain memory copy: no page
    faults, no page-table setup. Otherwise MAP_POPULATE maps every page in one call
    instead of one fault per 4 KiB. Each buffer is copied once, straight from the
    caller's memory into shared memory.
    """
    header, spans, total = _layout(so)
    seg = _WRITER_MAPS.acquire(path, total)
    if seg is None:  # a fresh file: write() allocates its pages faster than a mapping
        return write_file(so, path, exclusive=False)
    try:
        mm = seg.mm
        mm[0:len(header)] = header
        mm[len(header):len(header) + len(so.meta)] = so.meta
        for (off, n), b in zip(spans, so.buffers):
            mm[off:off + n] = _raw(b)
    except BaseException:
        seg.close()
        raise
    _WRITER_MAPS.release(seg)
    return total


@dataclass
class _Segment:
    fd: int
    ino: tuple[int, int]
    mm: mmap.mmap

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


class _WriterMaps:
    """Writable mappings of segments this process wrote, kept open for the next put().

    The node recycles a freed segment (same inode, new name) for a new object of a
    similar size; finding its mapping here skips mapping 25,600 pages per 100 MiB.
    Entries whose file was deleted (st_nlink == 0) are dropped at the next put, and
    at most `max_entries` / `max_bytes` are kept, so stale pages stay bounded.
    """

    def __init__(self, max_entries: int = 4, max_bytes: int = 3 << 29) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._free: dict[tuple[int, int], _Segment] = {}

    def acquire(self, path: str, total: int) -> _Segment | None:
        """A mapping of `path` sized `total`; None if the file is new (no pages to reuse)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            st = os.fstat(fd)
            ino = (st.st_dev, st.st_ino)
            with self._lock:
                seg = self._free.pop(ino, None)
            if seg is not None:
                if len(seg.mm) == total and st.st_size == total:
                    os.close(fd)
                    return seg
                seg.close()
            if st.st_size == 0:
                os.close(fd)
                return None
            if st.st_size != total:
                os.ftruncate(fd, total)
            mm = mmap.mmap(fd, total, flags=mmap.MAP_SHARED | _MAP_POPULATE)
        except BaseException:
            os.close(fd)
            raise
        return _Segment(fd, ino, mm)

    def drop_stale(self) -> None:
        with self._lock:
            stale = [ino for ino, s in self._free.items() if os.fstat(s.fd).st_nlink == 0]
            drop = [self._free.pop(ino) for ino in stale]
        for d in drop:
            d.close()

    def release(self, seg: _Segment) -> None:
        drop = []
        with self._lock:
            for ino, other in list(self._free.items()):
                if os.fstat(other.fd).st_nlink == 0:
                    drop.append(self._free.pop(ino))
            self._free[seg.ino] = seg
            while self._free and (len(self._free) > self.max_entries
                                  or sum(len(s.mm) for s in self._free.values()) > self.max_bytes):
                drop.append(self._free.pop(next(iter(self._free))))
        for d in drop:
            d.close()


_WRITER_MAPS = _WriterMaps()


def drop_stale_writer_maps() -> int:
    """Unmap cached segments whose files were deleted (called periodically by the client);
    returns how many stay cached."""
    _WRITER_MAPS.drop_stale()
    return len(_WRITER_MAPS._free)
if hasattr(os, "register_at_fork"):  # a forked worker starts with no parent's mappings
    os.register_at_fork(after_in_child=lambda: _WRITER_MAPS._free.clear())


_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _raw(b: Any) -> Any:
    """The buffer's bytes as one flat byte view, whatever its shape. Never `memoryview.cast("B")`:
    Python refuses to cast a view with a 0 in its shape (an empty 2-D array, an empty
    DataFrame's columns), while `PickleBuffer.raw()` flattens any contiguous buffer."""
    if isinstance(b, bytes):
        return b
    pb = b if isinstance(b, pickle.PickleBuffer) else pickle.PickleBuffer(b)
    try:
        return pb.raw()  # flat bytes of a C- or Fortran-contiguous buffer, no copy
    except BufferError:  # not contiguous
        return memoryview(b).tobytes(order="A")


def _writev_all(fd: int, pieces: list) -> None:
    views = [v for v in (memoryview(_raw(p)) for p in pieces) if v.nbytes]
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


def read_file(path: str, on_map: Callable[[mmap.mmap], None] | None = None) -> tuple[int, Any]:
    """Map the object read-only and unpickle it; buffers are views into the mapping.

    The shared lock taken here lives as long as the mapping (mmap keeps a dup of the
    descriptor): it tells the node the file is in use and must not be recycled.
    `on_map(mapping)` lets the caller follow the mapping's life (weakref.finalize).
    """
    with open(path, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        size = os.fstat(f.fileno()).st_size
        # a private mapping: reads share the page cache (zero-copy); a write through a
        # torch tensor copies that one page for this process instead of crashing on
        # read-only memory or changing other readers' data. numpy sees read-only views.
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    view = memoryview(mm).toreadonly()
    magic, kind, meta_len, nbuf = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        raise ValueError(f"{path} is not a raylite object file")
    spans = [_BUF.unpack_from(view, _HEAD.size + i * _BUF.size) for i in range(nbuf)]
    start = _HEAD.size + _BUF.size * nbuf
    meta = view[start:start + meta_len]
    bufs = [view[o:o + n] for o, n in spans]
    if on_map is not None:
        on_map(mm)
    return kind, pickle.loads(meta, buffers=bufs)


# ---------------------------------------------------------------- error messages
def _explain_failure(value: Any, what: str, err: Exception, arguments: bool = False) -> ObjectSerializationError:
    steps, culprit = _find_unpicklable(value, [], depth=0)
    kind = f"{type(culprit).__module__}.{type(culprit).__qualname__}"
    if kind.startswith("builtins."):
        kind = kind[len("builtins."):]
    msg = (f"Could not serialize {what}: {_describe_path(value, what, steps, arguments)} is a {kind}, which "
           f"cannot be pickled ({err}). Create it inside the task or actor instead of passing it, or make "
           "the object picklable (define __reduce__ or __getstate__).")
    return ObjectSerializationError(msg)


def _describe_path(value: Any, what: str, steps: list[str], arguments: bool) -> str:
    """"its 1st positional argument, at [0]['k'].lock" rather than "(args, kwargs)[0][0][0]..."."""
    if arguments and len(steps) > 1 and isinstance(value, tuple) and len(value) == 2:
        if steps[0] == "[0]":
            root = f"its {_ordinal(int(steps[1][1:-1]) + 1)} positional argument"
        else:
            root = f"its keyword argument {steps[1][2:-2]}"
        rest = "".join(steps[2:])
        return f"{root}, at {rest}," if rest else root
    return f"the part at {''.join(steps)}" if steps else "it"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _picklable(obj: Any) -> bool:
    try:
        cloudpickle.dumps(obj, protocol=5, buffer_callback=lambda b: None)
        return True
    except Exception:  # noqa: BLE001
        return False


def _find_unpicklable(obj: Any, steps: list[str], depth: int) -> tuple[list[str], Any]:
    """The innermost member that does not pickle, and the steps that reach it."""
    if depth > 8:
        return steps, obj
    children: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = [(f".{k}", v) for k, v in vars(obj).items()]
    for step, child in children:
        if not _picklable(child):
            return _find_unpicklable(child, [*steps, step], depth + 1)
    return steps, obj
