"""Physical operators: the units the streaming executor schedules.

Lifecycle of an operator, driven only by the executor thread::

    start(ctx) -> (add_input | launch | on_ready | get_next)* -> all_inputs_done
               -> ... -> completed() [-> shutdown()]

An operator never blocks (except the AllToAll barrier, which runs its bulk
function when all inputs are in). It tells the executor what it holds
(``usage_bytes``), what a next launch would cost (``next_launch``), and which
refs it waits for (``active_refs``); the executor decides what to launch under
the memory budget and CPU slots.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raylite.data._internal import tasks
from raylite.data._internal.submitter import TaskOptions, TaskSubmitter
from raylite.data._internal.transforms import TransformChain
from raylite.data.block import BlockMetadata, compact_block
from raylite.data.context import DataContext


@dataclass
class RefBundle:
    """Blocks travelling together between operators: [(block ref, metadata)]."""

    blocks: list[tuple[Any, BlockMetadata]]

    def num_rows(self) -> int:
        return sum(m.num_rows or 0 for _, m in self.blocks)

    def size_bytes(self) -> int:
        return sum(m.size_bytes or 0 for _, m in self.blocks)

    def refs(self) -> list[Any]:
        return [r for r, _ in self.blocks]


@dataclass
class ExecCtx:
    submitter: TaskSubmitter
    context: DataContext


@dataclass
class OpStats:
    tasks: int = 0
    blocks_out: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    started_s: float = 0.0
    finished_s: float = 0.0
    task_wall_s: float = 0.0


@dataclass
class _Running:
    index: int
    block_ref: Any
    meta_ref: Any
    est_bytes: int
    cpus: float
    actor: Any = None
    started_s: float = field(default_factory=time.perf_counter)


class PhysicalOperator:
    """Base: an output queue, input bookkeeping and stats; subclasses add work."""

    is_source = False

    def __init__(self, name: str, deps: list[PhysicalOperator]) -> None:
        self.name = name
        self.deps = deps
        self.inputs_done = False
        self.finished = False  # told to stop early (a downstream limit was reached)
        self.stats = OpStats()
        self._out: deque[RefBundle] = deque()
        self._out_bytes = 0
        self.ctx: ExecCtx | None = None

    # -- lifecycle
    def start(self, ctx: ExecCtx) -> None:
        self.ctx = ctx
        self.stats.started_s = time.perf_counter()

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        raise NotImplementedError

    def input_done(self, input_index: int) -> None:
        """Dependency ``input_index`` will send nothing more."""

    def all_inputs_done(self) -> None:
        self.inputs_done = True

    def mark_finished(self) -> None:
        """Stop launching work; what is queued is dropped (a downstream limit was reached)."""
        self.finished = True

    def completed(self) -> bool:
        return (self.inputs_done or self.finished) and not self._out and self.num_running() == 0 and (
            self.finished or not self.has_queued_work()
        )

    def shutdown(self) -> None:
        self.stats.finished_s = self.stats.finished_s or time.perf_counter()

    # -- outputs
    def _emit(self, bundle: RefBundle) -> None:
        self._out.append(bundle)
        self._out_bytes += bundle.size_bytes()
        self.stats.blocks_out += len(bundle.blocks)
        self.stats.rows_out += bundle.num_rows()
        self.stats.bytes_out += bundle.size_bytes()

    def has_next(self) -> bool:
        return bool(self._out)

    def get_next(self) -> RefBundle:
        b = self._out.popleft()
        self._out_bytes -= b.size_bytes()
        return b

    # -- scheduling interface
    def has_queued_work(self) -> bool:
        return False

    def can_launch(self) -> bool:
        return False

    def next_launch(self) -> tuple[float, int, int]:
        """(cpus, estimated output bytes, queued input bytes it consumes) of the next launch."""
        return 0.0, 0, 0

    def launch(self) -> None:
        raise NotImplementedError

    def active_refs(self) -> list[Any]:
        return []

    def on_ready(self, ref: Any) -> None:
        raise NotImplementedError

    def num_running(self) -> int:
        return 0

    def cpus_in_use(self) -> float:
        return 0.0

    def usage_bytes(self) -> int:
        """Block bytes this operator holds or will soon hold (queued, running, output)."""
        return self._out_bytes

    def progress(self) -> str:
        return f"{self.stats.blocks_out} blocks, {self.stats.rows_out} rows"

    # -- totals for the progress bars (None: not known)
    def expected_rows(self) -> int | None:
        """Rows this operator will output: exact once it completed; before, its inputs' expected
        rows (one out per row in, as Ray's bars assume: a filter's total drops when it ends)."""
        if self.completed() and not self.finished:
            return self.stats.rows_out
        upstream = self._expected_input_rows()
        return None if upstream is None else max(upstream, self.stats.rows_out)

    def _expected_input_rows(self) -> int | None:
        totals = [d.expected_rows() for d in self.deps]
        return sum(totals) if totals and None not in totals else None  # type: ignore[arg-type]

    def expected_tasks(self) -> int | None:
        """Tasks this operator will run, where known before they run (a read's file listing)."""
        return None


class _TaskRunner(PhysicalOperator):
    """Shared by operators that run tasks: running table and (optionally ordered) outputs."""

    def __init__(self, name: str, deps: list[PhysicalOperator], preserve_order: bool = True) -> None:
        super().__init__(name, deps)
        self._running: dict[int, _Running] = {}  # id(meta_ref) -> running task
        self._by_ref: dict[int, Any] = {}
        self._next_index = 0
        self._next_release = 0
        self._done: dict[int, RefBundle] = {}
        self._done_bytes = 0
        self._preserve_order = preserve_order
        self._avg_out_bytes: float | None = None

    def _track(self, block_ref: Any, meta_ref: Any, est_bytes: int, cpus: float, actor: Any = None) -> None:
        r = _Running(self._next_index, block_ref, meta_ref, est_bytes, cpus, actor)
        self._next_index += 1
        self._running[id(meta_ref)] = r
        self._by_ref[id(meta_ref)] = meta_ref
        self.stats.tasks += 1

    def active_refs(self) -> list[Any]:
        return [r.meta_ref for r in self._running.values()]

    def num_running(self) -> int:
        return len(self._running)

    def cpus_in_use(self) -> float:
        return sum(r.cpus for r in self._running.values())

    def on_ready(self, ref: Any) -> None:
        assert self.ctx is not None
        r = self._running.pop(id(ref))
        self._by_ref.pop(id(ref), None)
        sub = self.ctx.submitter
        if r.block_ref is None:  # a dynamic map task: its refs are the blocks, then their metadata
            refs = list(sub.get([ref])[0])
            metas: list[BlockMetadata] = sub.get([refs[-1]])[0]
            bundle = RefBundle(list(zip(refs[:-1], metas)))
        else:
            bundle = RefBundle([(r.block_ref, sub.get([ref])[0])])
        self.stats.task_wall_s += time.perf_counter() - r.started_s
        n = self.stats.tasks - len(self._running)
        avg = self._avg_out_bytes or 0.0
        self._avg_out_bytes = avg + (bundle.size_bytes() - avg) / max(1, n)
        self._task_finished(r)
        if not self._preserve_order:
            self._emit(bundle)
            return
        self._done[r.index] = bundle
        self._done_bytes += bundle.size_bytes()
        while self._next_release in self._done:
            b = self._done.pop(self._next_release)
            self._done_bytes -= b.size_bytes()
            self._next_release += 1
            self._emit(b)

    def _task_finished(self, r: _Running) -> None:
        """Hook for pools (free the actor slot)."""

    def usage_bytes(self) -> int:
        running = sum(r.est_bytes for r in self._running.values())
        return self._out_bytes + self._done_bytes + running

    def _estimate(self, input_bytes: int) -> int:
        if self._avg_out_bytes is not None:
            return int(self._avg_out_bytes)
        return input_bytes


class InputDataBuffer(PhysicalOperator):
    """Source of data that already exists (driver blocks are put in the store at start)."""

    is_source = True

    def __init__(self, name: str, blocks: list[Any] | None = None, bundles: list[RefBundle] | None = None):
        super().__init__(name, [])
        self._blocks = blocks
        self._bundles = bundles

    def start(self, ctx: ExecCtx) -> None:
        super().start(ctx)
        if self._blocks is not None:
            for b in self._blocks:
                b = compact_block(b)  # a user's slice must not ship its parent's buffers
                self._emit(RefBundle([(ctx.submitter.put(b), BlockMetadata.of(b))]))
        for bundle in self._bundles or []:
            self._emit(bundle)
        self.inputs_done = True

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        raise AssertionError("InputDataBuffer has no inputs")

    def expected_rows(self) -> int | None:
        if self.ctx is not None:  # started: every block is out
            return self.stats.rows_out
        return None


class MapOperator(_TaskRunner):
    """Runs a fused TransformChain as tasks; a source when it owns read tasks."""

    def __init__(
        self,
        name: str,
        chain: TransformChain,
        deps: list[PhysicalOperator],
        options: TaskOptions,
        read_tasks: list[Any] | None = None,
        min_rows_per_bundle: int | None = None,
        max_concurrency: int | None = None,
        preserve_order: bool = True,
    ) -> None:
        super().__init__(name, deps, preserve_order)
        self.chain = chain
        self.options = options
        self.is_source = read_tasks is not None
        self._queue: deque[tuple[Any, list[tuple[Any, BlockMetadata]]]] = deque()
        self._queue_bytes = 0
        self._pending: list[tuple[Any, BlockMetadata]] = []
        self._pending_rows = 0
        self._min_rows = min_rows_per_bundle
        self._max_concurrency = max_concurrency
        self._chain_ref: Any = None
        self._read_tasks = read_tasks

    def _expected_input_rows(self) -> int | None:
        if self._read_tasks is None:
            return super()._expected_input_rows()
        rows = [rt.metadata.num_rows for rt in self._read_tasks]  # a range's, a listing's
        return sum(rows) if rows and None not in rows else None  # type: ignore[arg-type]

    def expected_rows(self) -> int | None:
        if self._read_tasks is not None and not (self.completed() and not self.finished):
            return self._expected_input_rows()  # a read's rows are its output
        return super().expected_rows()

    def expected_tasks(self) -> int | None:
        return len(self._read_tasks) if self._read_tasks is not None else None

    def start(self, ctx: ExecCtx) -> None:
        super().start(ctx)
        self._chain_ref = ctx.submitter.put(self.chain)
        if self._read_tasks is not None:
            for rt in self._read_tasks:
                self._queue.append((rt, []))
            self.inputs_done = True

    # inputs are bundled until they hold min_rows_per_bundle rows (map_batches batch_size)
    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        self._pending.extend(bundle.blocks)
        self._pending_rows += bundle.num_rows()
        self._queue_bytes += bundle.size_bytes()
        if self._min_rows is None or self._pending_rows >= self._min_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._queue.append((None, self._pending))
            self._pending, self._pending_rows = [], 0

    def all_inputs_done(self) -> None:
        self._flush()
        super().all_inputs_done()

    def mark_finished(self) -> None:
        super().mark_finished()
        self._queue.clear()
        self._pending = []
        self._queue_bytes = 0

    def has_queued_work(self) -> bool:
        return bool(self._queue) or bool(self._pending)

    def can_launch(self) -> bool:
        if self.finished or not self._queue:
            return False
        return self._max_concurrency is None or len(self._running) < self._max_concurrency

    def _peek_cost(self) -> tuple[int, int]:
        source, blocks = self._queue[0]
        in_bytes = sum(m.size_bytes or 0 for _, m in blocks)
        if source is not None:
            est = source.metadata.size_bytes or 0
            return (int(self._avg_out_bytes) if self._avg_out_bytes is not None else est), 0
        return self._estimate(in_bytes), in_bytes

    def next_launch(self) -> tuple[float, int, int]:
        est, consumed = self._peek_cost()
        return self.options.num_cpus, est, consumed

    def launch(self) -> None:
        assert self.ctx is not None
        est, consumed = self._peek_cost()
        source, blocks = self._queue.popleft()
        self._queue_bytes -= consumed
        target = self.ctx.context.target_max_block_size
        out = self.ctx.submitter.submit(
            tasks.map_task, [self._chain_ref, source, self._next_index, target, *[r for r, _ in blocks]],
            num_returns="dynamic", options=self.options, name=self.name,
        )
        self._track(None, out[0], est, self.options.num_cpus)

    def usage_bytes(self) -> int:
        return super().usage_bytes() + self._queue_bytes


class ActorPoolMapOperator(MapOperator):
    """Runs the chain on a pool of ``MapWorker`` actors (callable-class UDFs, ``concurrency=``)."""

    def __init__(self, *args: Any, pool_bounds: tuple[int, int] = (1, 1), max_tasks_in_flight: int = 2,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._min_size, self._max_size = pool_bounds
        self._max_in_flight = max(1, max_tasks_in_flight)
        self._actors: list[Any] = []
        self._in_flight: dict[int, int] = {}

    def start(self, ctx: ExecCtx) -> None:
        super().start(ctx)
        for _ in range(self._min_size):
            self._add_actor()

    def _add_actor(self) -> None:
        assert self.ctx is not None
        actor = self.ctx.submitter.start_actor(tasks.MapWorker, [self.chain, self.options.num_cpus],
                                               self.options, name=self.name)
        self._actors.append(actor)
        self._in_flight[id(actor)] = 0

    def pool_size(self) -> int:
        return len(self._actors)

    def can_launch(self) -> bool:
        if self.finished or not self._queue:
            return False
        if any(n < self._max_in_flight for n in self._in_flight.values()):
            return True
        if len(self._actors) < self._max_size and len(self._queue) > 1:
            self._add_actor()  # grow the pool under load, up to max_size
            return True
        return False

    def next_launch(self) -> tuple[float, int, int]:
        est, consumed = self._peek_cost()
        return 0.0, est, consumed  # the actors already hold their CPUs

    def launch(self) -> None:
        assert self.ctx is not None
        est, consumed = self._peek_cost()
        source, blocks = self._queue.popleft()
        self._queue_bytes -= consumed
        actor = min(self._actors, key=lambda a: self._in_flight[id(a)])
        self._in_flight[id(actor)] += 1
        args = [source, self._next_index, self.ctx.context.target_max_block_size, *[r for r, _ in blocks]]
        out = self.ctx.submitter.call_actor(actor, "run", args, num_returns="dynamic")
        self._track(None, out[0], est, 0.0, actor)

    def _task_finished(self, r: _Running) -> None:
        if r.actor is not None and id(r.actor) in self._in_flight:
            self._in_flight[id(r.actor)] -= 1

    def cpus_in_use(self) -> float:
        return self.options.num_cpus * len(self._actors)

    def completed(self) -> bool:
        done = super().completed()
        if done and self._actors:
            self._kill_actors()
        return done

    def _kill_actors(self) -> None:
        assert self.ctx is not None
        for a in self._actors:
            self.ctx.submitter.kill_actor(a)
        self._actors = []
        self._in_flight = {}

    def shutdown(self) -> None:
        if self._actors and self.ctx is not None:
            self._kill_actors()
        super().shutdown()


class LimitOperator(_TaskRunner):
    """Passes bundles until ``limit`` rows went by; slices the bundle that crosses it."""

    def __init__(self, name: str, deps: list[PhysicalOperator], limit: int) -> None:
        super().__init__(name, deps)
        self.limit = limit
        self._seen = 0

    def reached(self) -> bool:
        return self._seen >= self.limit

    def expected_rows(self) -> int | None:
        upstream = self._expected_input_rows()
        return self.limit if upstream is None else min(self.limit, upstream)

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        assert self.ctx is not None
        if self.reached():
            return
        rows = bundle.num_rows()
        if self._seen + rows <= self.limit:
            self._seen += rows
            self._emit(bundle)
            return
        need = self.limit - self._seen
        spec, refs = [], []
        for ref, meta in bundle.blocks:
            take = min(need, meta.num_rows or 0)
            if take <= 0:
                break
            spec.append((len(refs), 0, take))
            refs.append(ref)
            need -= take
        self._seen = self.limit
        out = self.ctx.submitter.submit(tasks.slice_task, [spec, *refs], num_returns=2,
                                        options=TaskOptions(num_cpus=0.0), name="Limit")
        self._track(out[0], out[1], bundle.size_bytes(), 0.0)

    def completed(self) -> bool:
        return (self.inputs_done or self.reached()) and not self._out and not self._running and not self._done


class AllToAllOperator(PhysicalOperator):
    """A barrier: collects every input, then runs ``bulk_fn(bundles, ctx)`` for the outputs."""

    def __init__(self, name: str, deps: list[PhysicalOperator], bulk_fn: Callable[..., list[RefBundle]]):
        super().__init__(name, deps)
        self._bulk_fn = bulk_fn
        self._inputs: list[RefBundle] = []
        self._in_bytes = 0

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        self._inputs.append(bundle)
        self._in_bytes += bundle.size_bytes()

    def all_inputs_done(self) -> None:
        assert self.ctx is not None
        super().all_inputs_done()
        inputs, self._inputs = self._inputs, []
        self._in_bytes = 0
        for bundle in self._bulk_fn(inputs, self.ctx):
            self._emit(bundle)
        self.stats.tasks += 1

    def usage_bytes(self) -> int:
        return self._out_bytes + self._in_bytes


class UnionOperator(PhysicalOperator):
    """Outputs input 0's bundles, then input 1's, ... (order preserved)."""

    def __init__(self, name: str, deps: list[PhysicalOperator]) -> None:
        super().__init__(name, deps)
        self._buffers: list[list[RefBundle]] = [[] for _ in deps]
        self._dep_done = [False] * len(deps)
        self._cur = 0

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        if input_index == self._cur:
            self._emit(bundle)
        else:
            self._buffers[input_index].append(bundle)

    def input_done(self, input_index: int) -> None:
        self._dep_done[input_index] = True
        while self._cur < len(self.deps) and self._dep_done[self._cur]:
            self._cur += 1
            if self._cur < len(self.deps):
                for b in self._buffers[self._cur]:
                    self._emit(b)
                self._buffers[self._cur] = []

    def usage_bytes(self) -> int:
        return self._out_bytes + sum(b.size_bytes() for buf in self._buffers for b in buf)


class ZipOperator(_TaskRunner):
    """Barrier on both inputs, then one task per left block joins the matching right rows."""

    def __init__(self, name: str, deps: list[PhysicalOperator]) -> None:
        super().__init__(name, deps)
        self._sides: list[list[RefBundle]] = [[], []]

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        self._sides[input_index].append(bundle)

    def all_inputs_done(self) -> None:
        assert self.ctx is not None
        super().all_inputs_done()
        left = [b for bundle in self._sides[0] for b in bundle.blocks]
        right = [b for bundle in self._sides[1] for b in bundle.blocks]
        n_left = sum(m.num_rows or 0 for _, m in left)
        n_right = sum(m.num_rows or 0 for _, m in right)
        if n_left != n_right:
            raise ValueError(f"zip() needs datasets with the same number of rows; got {n_left} and {n_right}.")
        offsets = _offsets([m.num_rows or 0 for _, m in right])
        start = 0
        for ref, meta in left:
            end = start + (meta.num_rows or 0)
            spec, refs = _slice_spec(right, offsets, start, end)
            out = self.ctx.submitter.submit(tasks.zip_task, [spec, ref, *refs], num_returns=2,
                                            options=TaskOptions(num_cpus=0.0), name="Zip")
            self._track(out[0], out[1], meta.size_bytes * 2, 0.0)
            start = end
        self._sides = [[], []]


def _offsets(counts: list[int]) -> list[int]:
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def _slice_spec(blocks: list[tuple[Any, BlockMetadata]], offsets: list[int], start: int, end: int
                ) -> tuple[list[tuple[int, int, int]], list[Any]]:
    """Slices of ``blocks`` covering global rows [start, end): (arg index, lo, hi) + refs."""
    spec: list[tuple[int, int, int]] = []
    refs: list[Any] = []
    for (ref, meta), off in zip(blocks, offsets):
        n = meta.num_rows or 0
        lo, hi = max(start, off), min(end, off + n)
        if lo < hi:
            spec.append((len(refs), lo - off, hi - off))
            refs.append(ref)
    return spec, refs
