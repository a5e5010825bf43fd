"""The training controller: runs attempts of a worker group until the run ends.

Phases (one-line grammar, STYLE E6):
    SCHEDULING -> RUNNING [-> RESTARTING -> SCHEDULING -> RUNNING]* -> FINISHED | ERRORED

``step()`` moves one phase forward using only the WorkerGroup seam, the storage and
the pure parts (ReportAggregator, CheckpointManager, FailurePolicy), so unit tests
drive it with an in-process fake group. It runs in the driver process.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from raylite.train._internal.callbacks import CallbackDispatcher, CallbackFailed
from raylite.train._internal.checkpoints import CheckpointManager, TrackedCheckpoint
from raylite.train._internal.dashboard_feed import RunFeed
from raylite.train._internal.messages import (
    RankInfo,
    WorkerError,
    WorkerMetadata,
    WorkerPoll,
    WorkerState,
)
from raylite.train._internal.policies import FailureAction, FailurePolicy
from raylite.train._internal.progress import ProgressReporter
from raylite.train._internal.reports import LateCheckpoint, ReportAggregator, RunReport
from raylite.train._internal.session import WorkerSpec
from raylite.train._internal.state import RunState
from raylite.train._internal.storage import STATE_FILE, StorageContext, checkpoint_dir_name
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import CheckpointConfig, DataConfig, FailureConfig
from raylite.train.error import (
    ControllerError,
    TrainingFailedError,
    TrainingResourcesError,
    WorkerGroupError,
)
from raylite.train.result import Result, build_result

SHIP_WARN_BYTES = 256 * 2**20

# Builds one rank's spec once the group knows where every worker runs.
SpecFactory = Callable[[RankInfo, WorkerMetadata, WorkerMetadata], WorkerSpec]


class WorkerGroup(Protocol):
    """N training workers. Real: actors in a placement group; tests: threads."""

    def start(self, make_spec: SpecFactory, payload: tuple[Callable[..., Any], Any]) -> None:
        """Place the workers, assign ranks, and start every rank's loop."""

    def poll(self, timeout_s: float) -> list[WorkerPoll]:
        """News from the ranks that have some (a dead worker reads as FAILED, died=True)."""

    def shutdown(self) -> None:
        """Stop every worker now (a restart makes a new group)."""


class Phase(enum.Enum):
    SCHEDULING = "SCHEDULING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"


@dataclass
class RunSpec:
    """What the user asked for: fixed for the whole run (attempts included)."""

    trainer_name: str
    train_fn: Callable[..., Any]
    train_loop_config: dict[str, Any] | None
    num_workers: int
    storage: StorageContext
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    verbose: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    use_gpu: bool = False
    datasets: dict[str, Any] = field(default_factory=dict)
    dataset_config: DataConfig = field(default_factory=DataConfig)
    # (rank 0's metadata) -> the backend object each rank runs around its loop.
    backend_factory: Callable[[WorkerMetadata], Any] | None = None
    resume_from_checkpoint: Checkpoint | None = None
    trial_resources: dict[str, float] = field(default_factory=dict)
    # Checkpoints travel through the driver when storage is a local path and a worker
    # runs on another node. "auto" decides per worker; tests force True/False.
    ship_checkpoints: bool | str = "auto"
    driver_node_id: str = "local"
    poll_timeout_s: float = 1.0
    failure_drain_s: float = 0.5
    # RunConfig(callbacks=...), already bound to the run (None: no callbacks).
    callbacks: CallbackDispatcher | None = None


class TrainController:
    """Drives one run; ``run()`` returns the Result (or holds the error in it)."""

    def __init__(
        self,
        spec: RunSpec,
        group_factory: Callable[[], WorkerGroup],
        *,
        prior: RunState | None = None,
        clock: Callable[[], float] = time.monotonic,
        reporter: ProgressReporter | None = None,
    ) -> None:
        self.spec = spec
        self._group_factory = group_factory
        self._clock = clock
        self._reporter = reporter or ProgressReporter(spec.trainer_name, spec.verbose)
        self.state = prior or RunState(spec.storage.experiment_name)
        self.state.status, self.state.error, self.state.failures = "RUNNING", None, 0
        self.state.score_attribute = spec.checkpoint_config.checkpoint_score_attribute
        self.state.score_order = spec.checkpoint_config.checkpoint_score_order
        self.checkpoints = CheckpointManager(spec.checkpoint_config, self.state.checkpoints)
        self._policy = FailurePolicy(spec.failure_config)
        self.phase = Phase.SCHEDULING
        self.attempt = 0
        self.error: TrainingFailedError | BaseException | None = None
        self._group: WorkerGroup | None = None
        self._aggregator = ReportAggregator(spec.num_workers)
        self._finished: set[int] = set()
        self._attempt_metrics: dict[int, dict[str, Any]] = {}
        self._evicted: set[str] = set()
        self._first_index: int | None = None
        self._warned_shipping = False
        self._noted_shipping = False
        self._started_at = clock()
        self.feed = RunFeed(spec.storage.experiment_name, spec.trainer_name, spec.num_workers)

    # -- the loop -----------------------------------------------------------------
    def run(self) -> Result:
        try:
            try:
                while self.phase not in (Phase.FINISHED, Phase.ERRORED):
                    self.step()
            except CallbackFailed as e:  # a user callback ends the run with its own error
                self._fail_run(e.__cause__ or e, str(e))
        finally:
            self._stop_group()
        if self.phase is Phase.ERRORED:
            self._sweep_unkept()  # the workers are gone: nothing writes any more
        self.feed.finished(self.state.status, self.state.error)
        elapsed = self._clock() - self._started_at
        self._reporter.finished(
            self.phase.value.lower(), len(self.state.history), elapsed, self.spec.storage.experiment_path
        )
        if self.spec.callbacks is not None:
            try:
                self.spec.callbacks.ended(errored=self.phase is Phase.ERRORED)
            except CallbackFailed as e:
                if self.error is None:
                    self._fail_run(e.__cause__ or e, str(e))
        return self.result()

    def step(self) -> Phase:
        if self.phase is Phase.SCHEDULING:
            self._start_attempt()
        elif self.phase is Phase.RUNNING:
            self._absorb(self._group.poll(self.spec.poll_timeout_s) if self._group else [])
            self.feed.publish()
        elif self.phase is Phase.RESTARTING:
            self._stop_group()
            self.phase = Phase.SCHEDULING
        return self.phase

    # -- SCHEDULING ---------------------------------------------------------------
    def _resume_checkpoint(self) -> Checkpoint | None:
        latest = self.checkpoints.latest
        if latest is not None:
            storage = self.spec.storage
            return Checkpoint(storage.checkpoint_fs_path(latest.dir_name), storage.fs)
        return self.spec.resume_from_checkpoint

    def _start_attempt(self) -> None:
        spec = self.spec
        self.attempt += 1
        self._aggregator = ReportAggregator(spec.num_workers)
        self._finished = set()
        self._attempt_metrics = {}
        base = spec.storage.next_checkpoint_index()
        if self._first_index is None:
            self._first_index = base
        resume = self._resume_checkpoint()
        self._persist_state()
        self.feed.attempt(self.attempt)
        self._reporter.started(self.attempt, spec.num_workers, resume.path if resume else None)
        if spec.callbacks is not None:
            spec.callbacks.started(self.attempt)
        shards = self._split_datasets()

        def make_spec(rank: RankInfo, me: WorkerMetadata, rank0: WorkerMetadata) -> WorkerSpec:
            ship = spec.ship_checkpoints
            if ship == "auto":
                ship = spec.storage.is_local and me.node_id != spec.driver_node_id
            if ship and not self._noted_shipping:
                self._noted_shipping = True
                self._reporter.note(
                    1,
                    f"checkpoints of rank {rank.world_rank} (node {me.node_ip}) reach "
                    f"{spec.storage.storage_path} through the driver: that path is local to "
                    "the driver's node",
                )
            packed = None
            ckpt = resume
            if ship and resume is not None:
                from raylite.train._internal.storage import pack_directory

                with resume.as_directory() as local:
                    packed = pack_directory(local)
                ckpt = None
            return WorkerSpec(
                rank=rank,
                experiment_name=spec.storage.experiment_name,
                storage=spec.storage,
                checkpoint=ckpt,
                packed_checkpoint=packed,
                dataset_shards=shards[rank.world_rank],
                metadata=dict(spec.metadata),
                report_index_base=base,
                ship_checkpoints=bool(ship),
                trial_resources=dict(spec.trial_resources),
                use_gpu=spec.use_gpu,
                backend=spec.backend_factory(rank0) if spec.backend_factory else None,
            )

        try:
            self._group = self._group_factory()
            self._group.start(make_spec, (spec.train_fn, spec.train_loop_config))
        except TrainingResourcesError as e:
            self._fail_run(e, f"{spec.trainer_name} could not start: {e}")
            return
        except Exception as e:  # noqa: BLE001 - a start failure counts like a worker failure
            self._on_failure(WorkerError(-1, f"{type(e).__name__}: {e}", e))
            return
        self.phase = Phase.RUNNING

    def _split_datasets(self) -> list[dict[str, Any]]:
        n = self.spec.num_workers
        out: list[dict[str, Any]] = [{} for _ in range(n)]
        for name, ds in self.spec.datasets.items():
            if callable(ds) and not hasattr(ds, "streaming_split"):
                ds = ds()  # Ray accepts a zero-arg factory too
            if self.spec.dataset_config.should_split(name) and hasattr(ds, "streaming_split"):
                with self._data_reserves_for_workers():
                    parts = list(ds.streaming_split(n, equal=True))
            else:
                whole = ds.iterator() if hasattr(ds, "iterator") else ds
                parts = [whole] * n
            for rank in range(n):
                out[rank][name] = parts[rank]
        return out

    @contextlib.contextmanager
    def _data_reserves_for_workers(self) -> Iterator[None]:
        """Tell Data, as Ray Train does, that this run's workers hold their CPUs and GPUs
        (``exclude_resources``): Data then sizes its work to what is left, and says at once
        when its tasks need CPUs that only the workers have (else the run waits forever)."""
        from raylite.data import DataContext, ExecutionResources

        ctx = DataContext.get_current()
        saved = ctx.execution_options
        options = copy.deepcopy(self.spec.dataset_config.execution_options or saved)
        n, per = self.spec.num_workers, self.spec.trial_resources
        held = options.exclude_resources
        options.exclude_resources = ExecutionResources(
            cpu=(held.cpu or 0.0) + n * float(per.get("CPU", 0.0)),
            gpu=(held.gpu or 0.0) + n * float(per.get("GPU", 0.0)),
            object_store_memory=held.object_store_memory)
        ctx.execution_options = options
        try:
            yield
        finally:
            ctx.execution_options = saved

    # -- RUNNING ------------------------------------------------------------------
    def _absorb(self, polls: list[WorkerPoll]) -> None:
        failure = self._take(polls)
        if failure is not None:
            self._drain_after_failure()
            self._on_failure(failure)
        elif len(self._finished) == self.spec.num_workers:
            for emission in self._aggregator.flush():
                self._emit(emission)
            self._sweep_unkept()
            self.state.status = "FINISHED"
            self._persist_state()
            self.phase = Phase.FINISHED

    def _take(self, polls: list[WorkerPoll]) -> WorkerError | None:
        """Record reports and finished ranks; return the first failure seen, if any."""
        failure: WorkerError | None = None
        for poll in polls:
            for report in poll.reports:
                self.feed.report(report.rank, report.index, report.metrics, report.timestamp)
                if report.packed is not None and report.checkpoint_dir:
                    self._warn_if_shipping_is_slow(len(report.packed))
                    self.spec.storage.persist_packed(report.packed, report.checkpoint_dir)
                if report.checkpoint_dir in self._evicted:
                    # A slower rank wrote into a folder already evicted; its report says
                    # the writing is done, so the folder can go for good now.
                    self.spec.storage.delete_checkpoint(report.checkpoint_dir)
                for emission in self._aggregator.add(report):
                    self._emit(emission)
            if poll.state is WorkerState.FINISHED and poll.rank not in self._finished:
                self._finished.add(poll.rank)
                for emission in self._aggregator.finished(poll.rank):
                    self._emit(emission)
            elif poll.state is WorkerState.FAILED and failure is None:
                failure = poll.error or WorkerError(poll.rank, "worker failed", died=True)
        return failure

    def _warn_if_shipping_is_slow(self, size_bytes: int) -> None:
        if size_bytes < SHIP_WARN_BYTES or self._warned_shipping:
            return
        self._warned_shipping = True
        warnings.warn(
            f"A {size_bytes / 2**20:.0f} MiB checkpoint reached storage_path="
            f"{self.spec.storage.storage_path!r} through the driver, because that path is local "
            "to the driver's machine and the worker runs on another node. That works, but every "
            "checkpoint crosses the network twice; for large ones set RunConfig(storage_path=...) "
            "to shared storage (NFS, or an fsspec URI such as s3://bucket/path).",
            stacklevel=2,
        )

    def _sweep_unkept(self) -> None:
        """Remove folders this run wrote but does not keep (evicted, or written by a
        failed attempt and never committed)."""
        kept = {c.dir_name for c in self.checkpoints.kept}
        first = self._first_index or 0
        for index in self.spec.storage.list_checkpoint_indices():
            name = checkpoint_dir_name(index)
            if index >= first and name not in kept:
                self.spec.storage.delete_checkpoint(name)

    def _drain_after_failure(self) -> None:
        """Collect reports the other ranks made before the failure (they may still be on
        their way) so a restart resumes from the newest committed checkpoint."""
        deadline = self._clock() + self.spec.failure_drain_s
        while self._group is not None and (left := deadline - self._clock()) > 0:
            polls = self._group.poll(min(left, 0.1))
            if not any(p.reports for p in polls):
                break
            self._take(polls)

    def _emit(self, emission: RunReport | LateCheckpoint) -> None:
        if isinstance(emission, LateCheckpoint):
            metrics = self._attempt_metrics.get(emission.index, {})
            self._commit_checkpoint(emission.checkpoint_dir, metrics)
            return
        metrics = dict(emission.metrics)
        metrics.setdefault("training_iteration", len(self.state.history) + 1)
        metrics.setdefault("time_total_s", round(self._clock() - self._started_at, 6))
        metrics.setdefault("timestamp", int(time.time()))
        self.state.history.append(metrics)
        self._attempt_metrics[emission.index] = metrics
        if emission.checkpoint_dir:
            self._commit_checkpoint(emission.checkpoint_dir, metrics)
        self._reporter.reported(metrics, emission.checkpoint_dir)
        if self.spec.callbacks is not None:
            storage = self.spec.storage
            ckpt = None
            if emission.checkpoint_dir:
                ckpt = Checkpoint(storage.checkpoint_fs_path(emission.checkpoint_dir), storage.fs)
            by_rank = [dict(emission.rank_metrics.get(r, {})) for r in range(self.spec.num_workers)]
            self.spec.callbacks.reported(by_rank, metrics, ckpt)

    def _commit_checkpoint(self, dir_name: str, metrics: dict[str, Any]) -> None:
        index = int(dir_name.rsplit("_", 1)[-1])
        evicted = self.checkpoints.register(TrackedCheckpoint(index, dir_name, metrics))
        for old in evicted:
            self._evicted.add(old.dir_name)
            self.spec.storage.delete_checkpoint(old.dir_name)
        self.state.checkpoints = self.checkpoints.kept
        self.feed.checkpoints(self.checkpoints.kept)
        self._persist_state()

    # -- failures -----------------------------------------------------------------
    def _on_failure(self, error: WorkerError) -> None:
        self.state.failures += 1
        if self.spec.callbacks is not None:
            self.spec.callbacks.worker_failed(error.rank, error.exception, error.describe())
        decision = self._policy.decide(self.state.failures)
        if decision.action is FailureAction.RESTART:
            self._reporter.failed(error.describe(), decision.reason)
            self._persist_state()
            self.phase = Phase.RESTARTING
            return
        message = (
            f"{self.spec.trainer_name} failed: {decision.reason}. Last failure: "
            f"{error.describe()}"
        )
        exc: TrainingFailedError
        if error.rank >= 0:
            exc = WorkerGroupError(message, {error.rank: error.exception} if error.exception else {},
                                   rank=error.rank, traceback_str=error.traceback_str)
        else:
            exc = ControllerError(error.exception or RuntimeError(error.describe()), message)
            exc.traceback_str = error.traceback_str
        exc.__cause__ = error.exception
        self._reporter.failed(error.describe(), "giving up")
        self._fail_run(exc, message)

    def _fail_run(self, exc: BaseException, message: str) -> None:
        self.error = exc
        self.state.status, self.state.error = "ERRORED", message
        self._persist_state()
        self.phase = Phase.ERRORED

    def _stop_group(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.shutdown()

    # -- output -------------------------------------------------------------------
    def _persist_state(self) -> None:
        try:
            self.spec.storage.write_bytes(STATE_FILE, self.state.to_json())
        except OSError:
            pass  # storage was checked before start; a transient error must not kill the run

    def result(self) -> Result:
        return build_result(self.spec.storage, self.state, self.checkpoints, self.error)
