"""Function export and argument packing of a CoreClient: what a task carries to its worker.

A remote function's pickled code goes to the head's key-value store once per process
(`export_function`), and a worker loads it from there once (`load_function`). A task's
arguments are pickled here (`pack_args`); big ones go to the object store as one object.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.refs import ObjectRef
from raylite._core.task_spec import ArgPlaceholder, PackedArgs

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.objects import ObjectPlane


class FunctionExport:
    """Owns the functions exported and loaded by this process; packs task arguments."""

    def __init__(self, links: ClientLinks, objects: ObjectPlane) -> None:
        self._links = links
        self._objects = objects
        self._inline_max = links.config.inline_threshold_bytes
        self.exported: set[bytes] = set()
        self.fn_cache: dict[bytes, Any] = {}

    def export_function(self, function_id: bytes, pickled: bytes) -> None:
        if function_id in self.exported:
            return
        links = self._links
        links.run_sync(links.head.request(P.KvPut("fn", function_id, pickled, False)))
        self.exported.add(function_id)

    def load_function(self, function_id: bytes) -> Any:
        fn = self.fn_cache.get(function_id)
        if fn is None:
            links = self._links
            reply = links.run_sync(links.head.request(P.KvGet("fn", function_id)))
            if reply.value is None:
                raise E.RaySystemError(f"function {function_id.hex()} was not exported to this cluster")
            import cloudpickle

            fn = cloudpickle.loads(reply.value)
            self.fn_cache[function_id] = fn
        return fn

    def pack_args(self, args: tuple, kwargs: dict, what: str) -> tuple[list, list, list]:
        """Pickle (args, kwargs); top-level refs become placeholders resolved by the executor.

        Returns (args payload, arg_refs, pinned object ids).
        """
        if not args and not kwargs:
            return NO_ARGS, NONE, NONE
        if all(type(a) in _PLAIN for a in args) and all(type(v) in _PLAIN for v in kwargs.values()):
            # numbers and short strings: the standard pickler is enough and much cheaper
            meta = pickle.dumps((args, kwargs), protocol=5)
            if len(meta) <= self._inline_max:
                return ["inline", meta, []], [], []
        arg_refs: list = []
        pinned: list = []
        if any(isinstance(a, ObjectRef) for a in args) or any(isinstance(v, ObjectRef) for v in kwargs.values()):
            args = list(args)
            for i, a in enumerate(args):
                if isinstance(a, ObjectRef):
                    args[i] = ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), a._id, a._owner])
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if isinstance(v, ObjectRef):
                    kwargs[k] = ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), v._id, v._owner])
        so = ser.serialize((tuple(args), kwargs), what=f"the arguments of {what}", arguments=True)
        pinned = [r[1] for r in arg_refs] + [r._id for r in so.contained_refs]
        links = self._links
        if so.total_bytes() > self._inline_max:
            ref = self._objects.put(PackedArgs(so.meta, [memoryview(b) for b in so.buffers]))
            pinned.append(ref._id)
            payload = ["ref", ref._id, links.address]
        else:
            payload = ["inline", *so.to_inline()]
        with links.lock:
            links.refs.add_submitted(pinned)
        return payload, arg_refs, pinned


NO_ARGS = ["inline", pickle.dumps(((), {}), protocol=5), []]  # shared: never mutated
NONE: tuple = ()  # no argument refs, nothing pinned: shared by every task without arguments
_PLAIN = frozenset({int, float, bool, str, bytes, type(None)})
