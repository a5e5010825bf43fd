"""The per-worker training session behind ``train.report``, ``get_checkpoint``, ``get_context``.

One session exists per training worker while its loop runs. It knows the rank, the
run's storage and what to resume from; ``report`` persists a checkpoint (so the
caller may delete its temporary directory right after) and hands the report to a
sink, which the worker runtime drains when the driver polls.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raylite.train._internal.messages import RankInfo, WorkerMetadata, WorkerReport
from raylite.train._internal.reported import CheckpointConsistencyMode, ReportedCheckpoint
from raylite.train._internal.storage import StorageContext, checkpoint_dir_name, pack_directory
from raylite.train.checkpoint import Checkpoint


@dataclass
class WorkerSpec:
    """Everything one rank needs to run its loop in one attempt."""

    rank: RankInfo
    experiment_name: str
    storage: StorageContext
    checkpoint: Checkpoint | None = None
    packed_checkpoint: bytes | None = None  # the checkpoint, shipped to a remote node
    dataset_shards: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    report_index_base: int = 0
    ship_checkpoints: bool = False  # True: storage is local to the driver's node only
    trial_resources: dict[str, float] = field(default_factory=dict)
    use_gpu: bool = False
    backend: Any = None  # an object with on_start(spec) / on_shutdown(), or None
    # every rank's metadata in rank order (set by the worker group): backends whose
    # ranks connect to each other (LightGBM's socket network) read addresses here
    peers: tuple[WorkerMetadata, ...] = ()


class TrainContext:
    """What a training loop can ask about its place in the run (Ray's TrainContext)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self._spec = spec

    def get_world_size(self) -> int:
        return self._spec.rank.world_size

    def get_world_rank(self) -> int:
        return self._spec.rank.world_rank

    def get_local_rank(self) -> int:
        return self._spec.rank.local_rank

    def get_local_world_size(self) -> int:
        return self._spec.rank.local_world_size

    def get_node_rank(self) -> int:
        return self._spec.rank.node_rank

    def get_experiment_name(self) -> str:
        return self._spec.experiment_name

    def get_trial_name(self) -> str:
        return self._spec.experiment_name

    def get_trial_id(self) -> str:
        return self._spec.experiment_name

    def get_trial_dir(self) -> str:
        return self._spec.storage.experiment_path

    def get_trial_resources(self) -> dict[str, float]:
        return dict(self._spec.trial_resources)

    def get_metadata(self) -> dict[str, Any]:
        return dict(self._spec.metadata)

    def get_storage(self) -> StorageContext:
        return self._spec.storage


class WorkerStopped(Exception):
    """Raised in a loop whose worker group was shut down (in-process groups only)."""


def _plain(value: Any) -> Any:
    """Scalar tensors and numpy numbers become Python numbers, so metrics pickle small
    and land in JSON and pandas as numbers."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        try:
            return item()
        except Exception:  # noqa: BLE001 - keep the value as it is
            return value
    return value


class TrainSession:
    """One rank's session; ``sink`` receives each WorkerReport."""

    def __init__(
        self,
        spec: WorkerSpec,
        sink: Callable[[WorkerReport], None],
        stopping: threading.Event | None = None,
    ) -> None:
        self.spec = spec
        self._stopping = stopping or threading.Event()
        self.context = TrainContext(spec)
        self._sink = sink
        self._count = 0
        self._lock = threading.Lock()
        self._resume = spec.checkpoint
        self._reported: list[tuple[str, dict[str, Any]]] = []  # (checkpoint dir, metrics)

    def get_checkpoint(self) -> Checkpoint | None:
        return self._resume

    def get_dataset_shard(self, name: str) -> Any:
        shards = self.spec.dataset_shards
        if name not in shards:
            known = ", ".join(sorted(shards)) or "none"
            raise KeyError(
                f"train.get_dataset_shard({name!r}): no dataset of that name was passed to the "
                f"trainer (datasets given: {known}). Pass datasets={{{name!r}: ds}} to the trainer."
            )
        return shards[name]

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        if not isinstance(metrics, dict):
            raise TypeError(
                f"train.report(metrics=...) needs a dict, got {type(metrics).__name__}."
            )
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError(
                "train.report(checkpoint=...) needs a raylite.train.Checkpoint, got "
                f"{type(checkpoint).__name__}; wrap a directory with Checkpoint.from_directory(path)."
            )
        if self._stopping.is_set():
            raise WorkerStopped("This training worker was stopped by the controller.")
        with self._lock:
            index = self._count
            self._count += 1
        dir_name = packed = None
        if checkpoint is not None:
            dir_name = checkpoint_dir_name(self.spec.report_index_base + index)
            packed = self._persist(checkpoint, dir_name)
            if checkpoint._owned_tempdir:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        clean = {str(k): _plain(v) for k, v in metrics.items()}
        rank = self.spec.rank.world_rank
        self._sink(WorkerReport(rank, index, clean, dir_name, packed, time.time()))
        if dir_name is not None:
            with self._lock:
                self._reported.append((dir_name, dict(clean)))

    def reported_checkpoints(self) -> list[ReportedCheckpoint]:
        storage = self.spec.storage
        with self._lock:
            reported = list(self._reported)
        out = []
        for dir_name, metrics in reported:
            path = storage.checkpoint_fs_path(dir_name)
            if self.spec.ship_checkpoints or storage.fs.exists(path):  # still kept by the run
                out.append(ReportedCheckpoint(Checkpoint(path, storage.fs), metrics))
        return out

    def _persist(self, checkpoint: Checkpoint, dir_name: str) -> bytes | None:
        """Write the files to storage now (the caller's temp dir may vanish after report)."""
        with checkpoint.as_directory() as local_dir:
            if self.spec.ship_checkpoints:
                return pack_directory(local_dir)
            self.spec.storage.persist_directory(local_dir, dir_name)
        return None


# The current session: one per process in a real worker, one per thread in the
# in-process test group (several ranks then share a process).
_process_session: TrainSession | None = None
_thread = threading.local()


def set_session(session: TrainSession | None, *, thread_local: bool = False) -> None:
    global _process_session
    if thread_local:
        _thread.session = session
    else:
        _process_session = session


def get_session() -> TrainSession | None:
    return getattr(_thread, "session", None) or _process_session


def _require(what: str) -> TrainSession:
    session = get_session()
    if session is None:
        raise RuntimeError(
            f"{what} only works inside a training loop run by a trainer, e.g. "
            "TorchTrainer(train_func, ...).fit(); it was called outside of one."
        )
    return session


def report(metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
    """Report metrics (and optionally a checkpoint) from this worker to the driver.

    Not a barrier: ranks may report different numbers of times; the run records
    rank 0's metrics, and every rank's checkpoint files merge into one folder.
    """
    _require("train.report()").report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (latest kept one after a restart or restore), or None."""
    session = get_session()
    return session.get_checkpoint() if session is not None else None


def get_context() -> TrainContext:
    """This worker's rank, world size, run name and storage."""
    return _require("train.get_context()").context


def get_dataset_shard(name: str = "train") -> Any:
    """This worker's shard of the dataset passed as ``datasets={name: ds}``."""
    return _require("train.get_dataset_shard()").get_dataset_shard(name)


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """The checkpoints reported so far in this run (with their metrics), oldest first."""
    return _require("train.get_all_reported_checkpoints()").reported_checkpoints()
