"""The streaming executor: runs physical operators concurrently under a byte budget.

One background thread per execution loops:

1. hand finished tasks' outputs to their operators (``on_ready``);
2. move every operator's outputs to its consumers (the last operator's go to
   the output queue that the user's iterator reads);
3. tell operators whose dependencies finished that their inputs are done;
4. launch work, downstream operators first, while CPU slots are free and the
   memory budget allows;
5. wait (briefly) for any running task, or for the consumer to take output.

Memory budget ("backpressure"): the bytes of blocks held by the execution --
queued between operators, estimated for running tasks, and produced but not yet
taken by the consumer -- must stay under ``budget_bytes``. A source (read)
launch adds new bytes, so it waits for room; a downstream launch only turns
queued bytes into running bytes, so it is let through. When the consumer is
slow, its output queue fills the budget and the sources stop: memory stays
flat however large the dataset. One launch is always allowed when the
execution holds nothing at all, so a block larger than the budget still flows.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from raylite.data._internal.operators import (
    ExecCtx,
    LimitOperator,
    PhysicalOperator,
    RefBundle,
)
from raylite.data._internal.progress import ProgressReporter
from raylite.data._internal.submitter import TaskSubmitter
from raylite.data.context import DataContext

DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024
WAIT_TIMEOUT_S = 0.05


def budget_for(context: DataContext, submitter: TaskSubmitter) -> int:
    """The execution's byte budget: the user's limit, else a fraction of the object store."""
    limit = context.execution_options.resource_limits.object_store_memory
    if limit is not None:
        return int(limit)
    store = submitter.object_store_bytes()
    if store:
        return max(64 * 1024 * 1024, int(store * context.object_store_memory_fraction))
    return DEFAULT_BUDGET_BYTES


def cpu_limit_for(context: DataContext, submitter: TaskSubmitter) -> float:
    """The user's CPU limit, else the cluster's CPUs less those reserved for the execution's
    consumers (``exclude_resources``: a Train run's workers, set by Train as in Ray)."""
    limit = context.execution_options.resource_limits.cpu
    if limit is not None:
        return float(limit)
    excluded = context.execution_options.exclude_resources.cpu or 0.0
    if excluded:
        return max(0.0, submitter.total_cpus() - excluded)
    return max(1.0, submitter.total_cpus())


def reserved_cpu_warning(name: str, op_name: str, need: float, total: float, excluded: float) -> str:
    """Why an execution whose tasks need CPU its own consumers hold waits, and the fixes."""
    return (f"Dataset {name} cannot start: its {op_name} tasks need {need:g} CPU each, but {excluded:g} "
            f"of the cluster's {total:g} CPUs are held by the dataset's own consumers (a Train run's "
            "workers, reserved through DataContext.execution_options.exclude_resources), so the "
            "tasks wait for a CPU that is not freed while the consumers wait for the data. Fix one of: "
            "fewer training workers (ScalingConfig(num_workers=...)); fewer CPUs per worker "
            "(ScalingConfig(resources_per_worker={'CPU': 0.5})); Data tasks that need less "
            "(e.g. read_parquet(..., ray_remote_args={'num_cpus': 0.5}) where a CPU is partly free); "
            "or more CPUs in the cluster (raylite.init(num_cpus=...), raylite start --num-cpus).")


class StreamingExecutor:
    """Executes a topologically ordered list of operators; the last one is the output."""

    def __init__(
        self,
        ops: list[PhysicalOperator],
        submitter: TaskSubmitter,
        context: DataContext | None = None,
        *,
        name: str = "Dataset",
    ) -> None:
        self.ops = ops
        self.sink = ops[-1]
        self.context = context or DataContext.get_current()
        self.ctx = ExecCtx(submitter, self.context)
        self.submitter = submitter
        self.budget_bytes = budget_for(self.context, submitter)
        self.cpu_limit = cpu_limit_for(self.context, submitter)
        self.name = name
        self._consumers: dict[int, list[tuple[PhysicalOperator, int]]] = {id(op): [] for op in ops}
        for op in ops:
            for i, dep in enumerate(op.deps):
                self._consumers[id(dep)].append((op, i))
        self._dep_done_sent: set[tuple[int, int]] = set()
        self._output: deque[RefBundle] = deque()
        self._output_bytes = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._done = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.peak_usage_bytes = 0
        self._progress = ProgressReporter(ops, enabled=self.context.enable_progress_bars)
        self.started_s = 0.0
        self.finished_s = 0.0
        self._warned_reserved = False
        self._notice_key = ""

    # ---------------------------------------------------------------- consumer side

    def start(self) -> StreamingExecutor:
        self.started_s = time.perf_counter()
        for op in self.ops:
            op.start(self.ctx)
        self._thread = threading.Thread(target=self._run, name=f"data-executor-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __iter__(self) -> Iterator[RefBundle]:
        try:
            while True:
                bundle = self.next_bundle()
                if bundle is None:
                    return
                yield bundle
        finally:
            self.shutdown()

    def next_bundle(self, timeout_s: float | None = None) -> RefBundle | None:
        """The next output bundle; None at the end. Re-raises the execution's error."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self._output and not self._done and self._error is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"No output from {self.name} within {timeout_s} s")
                self._cond.wait(timeout=0.5 if remaining is None else min(0.5, remaining))
            if self._output:
                bundle = self._output.popleft()
                self._output_bytes -= bundle.size_bytes()
                self._cond.notify_all()
                return bundle
            if self._error is not None:
                raise self._error
            return None

    def shutdown(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        for op in self.ops:
            op.shutdown()
        self._progress.close()
        if self._notice_key:
            self.submitter.post_notice(self._notice_key, None)
            self._notice_key = ""

    # ---------------------------------------------------------------- the loop

    def _run(self) -> None:
        try:
            while not self._stop:
                self._step()
                if self.sink.completed() and not self.sink.has_next():
                    break
            self.finished_s = time.perf_counter()
        except BaseException as e:  # handed to the consumer thread
            with self._cond:
                self._error = e
                self._cond.notify_all()
            return
        finally:
            for op in self.ops:
                if isinstance(op, PhysicalOperator):
                    try:
                        op.shutdown()
                    except Exception:
                        pass
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def _step(self) -> None:
        self._route_outputs()
        self._propagate_done()
        self._launch()
        self.peak_usage_bytes = max(self.peak_usage_bytes, self.usage_bytes())
        self._progress.update()
        self._wait_for_progress()

    def _route_outputs(self) -> None:
        for op in self.ops:
            while op.has_next():
                bundle = op.get_next()
                if op is self.sink:
                    with self._cond:
                        self._output.append(bundle)
                        self._output_bytes += bundle.size_bytes()
                        self._cond.notify_all()
                    continue
                for consumer, idx in self._consumers[id(op)]:
                    if not consumer.finished:
                        consumer.add_input(bundle, idx)
            if isinstance(op, LimitOperator) and op.reached():
                self._finish_upstream(op)

    def _finish_upstream(self, op: PhysicalOperator) -> None:
        for dep in op.deps:
            if not dep.finished and all(c.finished or isinstance(c, LimitOperator)
                                        for c, _ in self._consumers[id(dep)]):
                dep.mark_finished()
                self._finish_upstream(dep)

    def _propagate_done(self) -> None:
        for op in self.ops:
            if op.inputs_done or not op.deps:
                continue
            for i, dep in enumerate(op.deps):
                if (id(op), i) not in self._dep_done_sent and dep.completed() and not dep.has_next():
                    self._dep_done_sent.add((id(op), i))
                    op.input_done(i)
            if all((id(op), i) in self._dep_done_sent for i in range(len(op.deps))):
                op.all_inputs_done()

    def usage_bytes(self) -> int:
        return sum(op.usage_bytes() for op in self.ops) + self._output_bytes

    def _launch(self) -> None:
        usage = self.usage_bytes()
        cpus = sum(op.cpus_in_use() for op in self.ops)
        nothing_running = all(op.num_running() == 0 for op in self.ops)
        cpu_blocked: list[tuple[PhysicalOperator, float]] = []
        for op in reversed(self.ops):  # downstream first: drain before producing more
            while op.can_launch():
                need_cpus, est_bytes, consumed = op.next_launch()
                if need_cpus > self.cpu_limit + 1e-9 and not self._warned_reserved:
                    self._warn_reserved_cpus(op, need_cpus)
                fits_cpu = cpus + need_cpus <= self.cpu_limit + 1e-9 or cpus == 0
                if not fits_cpu:
                    cpu_blocked.append((op, need_cpus))
                new_bytes = est_bytes - consumed
                fits_mem = usage + new_bytes <= self.budget_bytes or (not op.is_source and new_bytes <= 0)
                if not fits_mem and not op.is_source and op.num_running() == 0:
                    fits_mem = True  # a downstream operator with nothing running may always drain
                if not fits_mem and nothing_running and usage == 0:
                    fits_mem = True  # a block bigger than the budget must still flow
                if not (fits_cpu and fits_mem):
                    break
                op.launch()
                usage += new_bytes
                cpus += need_cpus
                nothing_running = False
        if cpu_blocked and nothing_running and not any(op.has_next() for op in self.ops):
            self._raise_cpu_deadlock(cpu_blocked[0], cpus)

    def _warn_reserved_cpus(self, op: PhysicalOperator, need: float) -> None:
        """Tasks that can only run on CPUs the consumers hold: say so at once (a log line the
        driver sees, and a notice `raylite status` shows) instead of waiting in silence. The
        task is still submitted: a CPU may yet be freed by something else."""
        excluded = self.context.execution_options.exclude_resources.cpu or 0.0
        if not excluded:
            return
        self._warned_reserved = True
        text = reserved_cpu_warning(self.name, op.name, need, self.submitter.total_cpus(), excluded)
        # the notice first: whoever reads the log line and then runs `raylite status` finds it
        self._notice_key = f"data_cpu_wait:{self.name}:{id(self):x}"
        self.submitter.post_notice(self._notice_key, text)
        sys.stderr.write(f"WARNING: {text}\n")
        sys.stderr.flush()

    def _raise_cpu_deadlock(self, blocked: tuple[PhysicalOperator, float], cpus_held: float) -> None:
        """Nothing runs and the next task can never get CPUs: actor pools hold them all."""
        op, need = blocked
        holders = [f"{o.name} ({o.cpus_in_use():g} CPUs)" for o in self.ops if o.cpus_in_use() > 0]
        raise RuntimeError(
            f"Data execution cannot make progress: operator {op.name} needs {need:g} CPU per task, but "
            f"{cpus_held:g} of the {self.cpu_limit:g} CPUs available to Data are held by "
            f"{', '.join(holders)}. Lower the actor pool's concurrency or num_cpus, or give the "
            "cluster more CPUs."
        )

    def _wait_for_progress(self) -> None:
        refs: list[Any] = []
        owner: dict[int, PhysicalOperator] = {}
        for op in self.ops:
            for r in op.active_refs():
                refs.append(r)
                owner[id(r)] = op
        if not refs:
            if self._has_immediate_work():
                return
            with self._cond:
                if not self._stop:
                    self._cond.wait(timeout=WAIT_TIMEOUT_S)
            return
        ready, _ = self.submitter.wait(refs, num_returns=1, timeout=WAIT_TIMEOUT_S)
        if ready:
            more, _ = self.submitter.wait(refs, num_returns=len(refs), timeout=0)
            seen = {id(r) for r in ready}
            ready = ready + [r for r in more if id(r) not in seen]
        for r in ready:
            owner[id(r)].on_ready(r)

    def _has_immediate_work(self) -> bool:
        return any(op.has_next() for op in self.ops) or any(
            not op.inputs_done and op.deps and all(d.completed() for d in op.deps) for op in self.ops
        )

    # ---------------------------------------------------------------- stats

    def stats_summary(self) -> str:
        lines = []
        total = (self.finished_s or time.perf_counter()) - self.started_s
        for op in self.ops:
            s = op.stats
            lines.append(
                f"Operator {op.name}: {s.tasks} tasks, {s.blocks_out} blocks, {s.rows_out} rows, "
                f"{s.bytes_out / 1e6:.1f} MB out, {s.task_wall_s:.2f} s task time"
            )
        lines.append(
            f"Dataset {self.name}: {total:.2f} s wall, peak held {self.peak_usage_bytes / 1e6:.1f} MB "
            f"(budget {self.budget_bytes / 1e6:.0f} MB)"
        )
        return "\n".join(lines)
