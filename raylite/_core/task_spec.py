"""What a task *is*: TaskSpec (a call to run) — immutable, and wire-encodable.

A spec covers three kinds of calls: a normal task, an actor creation (the
`__init__` call that makes the actor) and an actor method call. Arguments are
pickled together; top-level ObjectRef arguments are listed in `arg_refs` so the
executor resolves them before the call (nested refs stay refs): in the pickle each stands as an
`ArgPlaceholder`, and arguments too large for the message travel as one `PackedArgs` object.
Workers are reused only between tasks of one runtime environment, keyed by `env_key`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import pickle
from dataclasses import dataclass, field

from raylite._core.ids import ObjectID

KIND_TASK = 0
KIND_ACTOR_CREATE = 1
KIND_ACTOR_CALL = 2

STREAMING = -1  # num_returns="streaming"
DYNAMIC = -2  # num_returns="dynamic"


@dataclass(frozen=True)
class FunctionDescriptor:
    """Where the code lives: module, qualified name, and the export key of its pickle."""

    module: str
    qualname: str
    function_id: bytes  # key in the head KV namespace "fn" holding the pickled code

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}" if self.module not in ("__main__", "") else self.qualname


@dataclass(slots=True)
class TaskSpec:
    """Treated as immutable: change a copy made with `replace()`.

    Not a frozen dataclass on purpose: frozen __init__ pays an object.__setattr__ per
    field, and a spec is built on every task and actor call (the hot path).
    """

    task_id: bytes
    job_id: bytes
    kind: int
    function: FunctionDescriptor
    args: list  # [meta, [buffers]] of the pickled (args, kwargs)
    arg_refs: list  # [[placeholder_index, object_id, owner_address], ...]
    num_returns: int
    owner_address: str
    owner_worker_id: bytes
    resources: dict  # fixed-point
    name: str = ""
    max_retries: int = 0
    retry_exceptions: bool | list = False
    attempt: int = 0
    runtime_env: dict = field(default_factory=dict)
    strategy: list = field(default_factory=list)  # Strategy.to_wire() (strategy.py)
    # actors
    actor_id: bytes = b""
    method_name: str = ""
    seq_no: int = 0
    caller_id: bytes = b""
    max_restarts: int = 0
    max_task_retries: int = 0
    max_concurrency: int = 1
    is_async: bool = False
    actor_name: str = ""
    namespace: str = ""
    detached: bool = False
    method_meta: dict = field(default_factory=dict)  # {method: num_returns}
    concurrency_groups: dict = field(default_factory=dict)
    concurrency_group: str = ""
    parent_task_id: bytes = b""
    gpu_ids: list = field(default_factory=list)  # set by the owner from its lease, per attempt
    # hex id of the placement group this task's children are scheduled in when they name no
    # strategy (Ray's placement_group_capture_child_tasks=True); "" when they are not captured
    capture_pg: str = ""
    # Ray's max_calls: a worker that ran this function that many times exits (0: no limit)
    max_calls: int = 0
    device_ids: dict = field(default_factory=dict)  # other accelerators' devices (neuron_cores, TPU, ...), as gpu_ids

    def return_ids(self) -> list[ObjectID]:
        n = self.num_returns if self.num_returns > 0 else 1
        return [ObjectID.for_return(self.task_id, i + 1) for i in range(n)]

    def display_name(self) -> str:
        if self.name:
            return self.name
        short = self.function.qualname.rsplit(".", 1)[-1]
        if self.kind == KIND_ACTOR_CALL:
            return f"{short}.{self.method_name}"
        if self.kind == KIND_ACTOR_CREATE:
            return f"{short}.__init__"
        return short

    def to_wire(self) -> list:
        """The fields in declaration order (positional on the wire), the function as a list."""
        out = list(_get_fields(self))
        fn = out[_FUNCTION_AT]
        out[_FUNCTION_AT] = [fn.module, fn.qualname, fn.function_id]
        return out

    @classmethod
    def from_wire(cls, wire: list) -> TaskSpec:
        """Positional, as to_wire wrote it; a shorter list (an older peer) leaves the trailing
        fields at their defaults. A worker sees the same few functions over and over: their
        descriptors are made once."""
        fn = wire[_FUNCTION_AT]
        key = (fn[0], fn[1], fn[2])
        desc = _DESCRIPTORS.get(key)
        if desc is None:
            if len(_DESCRIPTORS) >= 4096:
                _DESCRIPTORS.clear()
            desc = _DESCRIPTORS[key] = FunctionDescriptor(fn[0], fn[1], fn[2])
        args = list(wire)
        args[_FUNCTION_AT] = desc
        return cls(*args)

    def replace(self, **changes) -> TaskSpec:
        new = object.__new__(TaskSpec)
        for f in _FIELDS:
            object.__setattr__(new, f, changes[f] if f in changes else getattr(self, f))
        return new


_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))
_FUNCTION_AT = _FIELDS.index("function")
_get_fields = operator.attrgetter(*_FIELDS)
# (module, qualname, function id) -> its FunctionDescriptor (frozen: shared safely); bounded
_DESCRIPTORS: dict[tuple, FunctionDescriptor] = {}


class ArgPlaceholder:
    """Stands for a top-level ObjectRef argument inside the pickled (args, kwargs)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self):
        return (ArgPlaceholder, (self.index,))


class PackedArgs:
    """Large pickled arguments, shipped through the object store instead of the message."""

    def __init__(self, meta: bytes, buffers: list) -> None:
        self.meta = meta
        self.buffers = buffers

    def __reduce_ex__(self, protocol):
        return (PackedArgs, (self.meta, [pickle.PickleBuffer(b) for b in self.buffers]))


def env_key(runtime_env: dict) -> str:
    """Workers are shared only between calls with the same runtime environment."""
    if not runtime_env:
        return ""
    relevant = {k: runtime_env.get(k) for k in ("env_vars", "working_dir", "py_modules", "pip", "uv", "_driver_sys_path")
                if runtime_env.get(k)}
    if not relevant:
        return ""
    return hashlib.sha1(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]
