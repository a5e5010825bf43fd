"""The seam between Data's executor and the cluster: ``TaskSubmitter``.

The executor never calls ``raylite`` directly; it asks a submitter to run a
function as a task, start an actor, call it, put/get/wait on objects. Two
implementations:

- ``RayliteSubmitter``: the public ``raylite`` API (``remote``, ``get``,
  ``wait``, ``put``, ``kill``) on a real cluster.
- ``LocalSubmitter``: a thread pool in this process, with futures as refs, so
  the planner, operators and budgeted streaming loop are unit-tested without
  processes or sockets.

Semantics every submitter keeps (Ray's): refs passed as top-level task
arguments are resolved to their values before the function runs; a task with
``num_returns=k`` returns a k-tuple stored as k objects; ``wait`` returns
(ready, not_ready) preserving the input order.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskOptions:
    """Resources and policies for one task or actor (Ray's option names)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: tuple[tuple[str, float], ...] = ()
    memory: float | None = None
    max_retries: int | None = None
    scheduling_strategy: Any = None
    max_concurrency: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def from_ray_remote_args(args: dict[str, Any], default_num_cpus: float = 1.0) -> TaskOptions:
        args = dict(args)
        known = {
            "num_cpus": float(args.pop("num_cpus", default_num_cpus) or 0.0),
            "num_gpus": float(args.pop("num_gpus", 0.0) or 0.0),
            "resources": tuple(sorted((args.pop("resources", None) or {}).items())),
            "memory": args.pop("memory", None),
            "max_retries": args.pop("max_retries", None),
            "scheduling_strategy": args.pop("scheduling_strategy", None),
            "max_concurrency": args.pop("max_concurrency", None),
        }
        return TaskOptions(**known, extra=tuple(sorted(args.items())))

    def to_ray_options(self, for_actor: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.num_gpus:
            out["num_gpus"] = self.num_gpus
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.memory is not None:
            out["memory"] = self.memory
        if self.max_retries is not None and not for_actor:
            out["max_retries"] = self.max_retries
        if self.scheduling_strategy is not None:
            out["scheduling_strategy"] = self.scheduling_strategy
        if self.max_concurrency is not None and for_actor:
            out["max_concurrency"] = self.max_concurrency
        out.update(dict(self.extra))
        return out


# KV namespace of notices `raylite status` shows (JSON {"text", "job_id"}; gone with their job)
NOTICE_NAMESPACE = "raylite_status"


class TaskSubmitter(ABC):
    """Runs Data's tasks and actors somewhere; see the module docstring."""

    @abstractmethod
    def submit(
        self, fn: Callable[..., Any], args: Sequence[Any], *, num_returns: int | str, options: TaskOptions,
        name: str = "",
    ) -> list[Any]:
        """Run ``fn(*args)`` as a task; returns ``num_returns`` refs (one for "dynamic": it
        resolves to the list of refs of the values the generator ``fn`` yielded)."""

    @abstractmethod
    def start_actor(
        self, cls: type, args: Sequence[Any], options: TaskOptions, name: str = ""
    ) -> Any:
        """Start an actor running ``cls(*args)``; returns its handle."""

    @abstractmethod
    def call_actor(self, actor: Any, method: str, args: Sequence[Any], *, num_returns: int | str) -> list[Any]:
        """Call ``actor.method(*args)``; returns ``num_returns`` refs."""

    @abstractmethod
    def kill_actor(self, actor: Any) -> None: ...

    @abstractmethod
    def put(self, value: Any) -> Any: ...

    @abstractmethod
    def get(self, refs: Sequence[Any], timeout: float | None = None) -> list[Any]: ...

    @abstractmethod
    def wait(self, refs: Sequence[Any], *, num_returns: int, timeout: float | None) -> tuple[list[Any], list[Any]]:
        """Block until ``num_returns`` refs are ready or ``timeout`` passes; never fetches data."""

    @abstractmethod
    def total_cpus(self) -> float: ...

    @abstractmethod
    def object_store_bytes(self) -> int | None:
        """Capacity of the cluster's object store, if known (sizes the memory budget)."""

    def is_ref(self, value: Any) -> bool:
        return False

    def post_notice(self, key: str, text: str | None) -> None:  # noqa: B027 - optional: no-op by default
        """Show ``text`` to the cluster's operators (``raylite status``); None takes it back."""


# ------------------------------------------------------------------ in-process


class LocalRef:
    """A ref whose value comes from a Future (optionally one element of a tuple result)."""

    __slots__ = ("future", "index")

    def __init__(self, future: Future, index: int | None = None) -> None:
        self.future = future
        self.index = index

    def result(self, timeout: float | None = None) -> Any:
        value = self.future.result(timeout)
        return value if self.index is None else value[self.index]

    def __repr__(self) -> str:
        return f"LocalRef({id(self.future):x}, {self.index})"


class _LocalActor:
    def __init__(self, instance: Any, max_concurrency: int) -> None:
        self.instance = instance
        self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="data-local-actor")
        self.dead = False


class LocalSubmitter(TaskSubmitter):
    """Runs tasks on a thread pool in this process; for unit tests and debugging."""

    def __init__(self, num_cpus: int = 2, object_store_bytes: int | None = 1 << 30) -> None:
        self._num_cpus = num_cpus
        self._store_bytes = object_store_bytes
        self._pool = ThreadPoolExecutor(max_workers=max(1, num_cpus) + 2, thread_name_prefix="data-local")
        self._actors: list[_LocalActor] = []
        self.tasks_submitted = 0
        self.actors_started = 0
        self._lock = threading.Lock()

    def _resolve(self, args: Sequence[Any]) -> list[Any]:
        return [a.result() if isinstance(a, LocalRef) else a for a in args]

    def _split(self, fut: Future, num_returns: int | str) -> list[Any]:
        if num_returns in (1, "dynamic"):
            return [LocalRef(fut)]
        return [LocalRef(fut, i) for i in range(int(num_returns))]

    def _call(self, fn: Callable[[], Any], num_returns: int | str) -> Any:
        """Run ``fn``; a "dynamic" task's generator becomes a list of refs (Ray's semantics)."""
        result = fn()
        if num_returns == "dynamic":
            return [self.put(item) for item in result]
        return result

    def submit(self, fn, args, *, num_returns, options, name=""):
        with self._lock:
            self.tasks_submitted += 1
        fut = self._pool.submit(lambda: self._call(lambda: fn(*self._resolve(args)), num_returns))
        return self._split(fut, num_returns)

    def start_actor(self, cls, args, options, name=""):
        with self._lock:
            self.actors_started += 1
        holder: dict[str, Any] = {}
        actor = _LocalActor(None, options.max_concurrency or 1)

        def construct() -> None:
            holder["x"] = cls(*self._resolve(args))
            actor.instance = holder["x"]

        actor.pool.submit(construct).result()
        self._actors.append(actor)
        return actor

    def call_actor(self, actor, method, args, *, num_returns):
        if actor.dead:
            raise RuntimeError("actor was killed")
        fut = actor.pool.submit(
            lambda: self._call(lambda: getattr(actor.instance, method)(*self._resolve(args)), num_returns))
        return self._split(fut, num_returns)

    def kill_actor(self, actor):
        actor.dead = True
        actor.pool.shutdown(wait=False, cancel_futures=True)

    def put(self, value):
        fut: Future = Future()
        fut.set_result(value)
        return LocalRef(fut)

    def get(self, refs, timeout=None):
        return [r.result(timeout) for r in refs]

    def wait(self, refs, *, num_returns, timeout):
        futs = {r.future for r in refs}
        pending = [f for f in futs if not f.done()]
        done_count = len(futs) - len(pending)
        if done_count < num_returns and pending:
            futures_wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
        ready = [r for r in refs if r.future.done()][:num_returns] if num_returns else []
        ready_ids = {id(r) for r in ready}
        return ready, [r for r in refs if id(r) not in ready_ids]

    def total_cpus(self):
        return float(self._num_cpus)

    def object_store_bytes(self):
        return self._store_bytes

    def is_ref(self, value):
        return isinstance(value, LocalRef)

    def shutdown(self) -> None:
        for a in self._actors:
            self.kill_actor(a)
        self._pool.shutdown(wait=True)


# ------------------------------------------------------------------ raylite cluster


@dataclass
class RayliteSubmitter(TaskSubmitter):
    """Runs tasks and actors on the raylite cluster through its public API only."""

    _remote_fns: dict[Any, Any] = field(default_factory=dict)
    _remote_classes: dict[Any, Any] = field(default_factory=dict)

    def _ray(self) -> Any:
        import raylite

        if not raylite.is_initialized():
            raylite.init()
        return raylite

    def submit(self, fn, args, *, num_returns, options, name=""):
        ray = self._ray()
        base = self._remote_fns.get(fn)
        if base is None:
            base = self._remote_fns[fn] = ray.remote(fn)
        opts = options.to_ray_options()
        opts["num_returns"] = num_returns
        if name:
            opts["name"] = name
        refs = base.options(**opts).remote(*args)
        return [refs] if num_returns in (1, "dynamic") else list(refs)

    def start_actor(self, cls, args, options, name=""):
        ray = self._ray()
        base = self._remote_classes.get(cls)
        if base is None:
            base = self._remote_classes[cls] = ray.remote(cls)
        return base.options(**options.to_ray_options(for_actor=True)).remote(*args)

    def call_actor(self, actor, method, args, *, num_returns):
        m = getattr(actor, method)
        if num_returns == "dynamic":
            return [m.options(num_returns="dynamic").remote(*args)]
        if num_returns != 1:
            return list(m.options(num_returns=num_returns).remote(*args))
        return [m.remote(*args)]

    def kill_actor(self, actor):
        ray = self._ray()
        with contextlib.suppress(Exception):
            ray.kill(actor)

    def put(self, value):
        return self._ray().put(value)

    def get(self, refs, timeout=None):
        return list(self._ray().get(list(refs), timeout=timeout))

    def wait(self, refs, *, num_returns, timeout):
        ready, not_ready = self._ray().wait(list(refs), num_returns=num_returns, timeout=timeout, fetch_local=False)
        return list(ready), list(not_ready)

    def total_cpus(self):
        return float(self._ray().cluster_resources().get("CPU", 1.0))

    def object_store_bytes(self):
        value = self._ray().cluster_resources().get("object_store_memory")
        return int(value) if value else None

    def post_notice(self, key, text):
        import json

        from raylite.experimental import internal_kv as kv

        ray = self._ray()
        try:
            if text is None:
                kv._internal_kv_del(key, namespace=NOTICE_NAMESPACE)
            else:
                job = ray.get_runtime_context().get_job_id()
                kv._internal_kv_put(key, json.dumps({"text": text, "job_id": job}), namespace=NOTICE_NAMESPACE)
        except Exception:  # noqa: BLE001 - a notice is best effort; the log line was written
            pass

    def is_ref(self, value):
        import raylite

        return isinstance(value, raylite.ObjectRef)


_overrides: list[TaskSubmitter] = []


def get_submitter() -> TaskSubmitter:
    """The submitter executions use: the innermost ``use_submitter`` override, else the cluster."""
    if _overrides:
        return _overrides[-1]
    return _RAYLITE


_RAYLITE = RayliteSubmitter()


@contextlib.contextmanager
def use_submitter(submitter: TaskSubmitter) -> Iterator[TaskSubmitter]:
    """Run Data executions started inside this block (any thread) on ``submitter``."""
    _overrides.append(submitter)
    try:
        yield submitter
    finally:
        _overrides.remove(submitter)
