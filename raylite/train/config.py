"""What the user asks of a training run: scaling, storage, checkpoints, failures.

These are specs (immutable intent, STYLE E5); what the run knows at a given moment
lives in the controller. Names and defaults follow Ray 2.x so code moves unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass
class ScalingConfig:
    """How many training workers to start and what each one holds.

    ``resources_per_worker`` defaults to one CPU (plus one GPU with ``use_gpu``). With
    ``use_gpu=False`` a ``GPU`` entry in ``resources_per_worker`` is dropped with a
    warning instead of raising as Ray does, so a GPU script runs on a CPU-only machine
    by flipping only ``use_gpu``. ``trainer_resources`` is accepted for compatibility:
    raylite's controller runs in the driver and reserves nothing.
    """

    num_workers: int | None = None
    use_gpu: bool = False
    resources_per_worker: dict[str, float] | None = None
    placement_strategy: str = "PACK"
    trainer_resources: dict[str, float] | None = None
    accelerator_type: str | None = None
    topology: str | None = None

    def __post_init__(self) -> None:
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"ScalingConfig(num_workers={self.num_workers}): need at least 1 worker.")
        if self.placement_strategy not in _PLACEMENT_STRATEGIES:
            raise ValueError(
                f"ScalingConfig(placement_strategy={self.placement_strategy!r}): "
                f"choose one of {', '.join(_PLACEMENT_STRATEGIES)}."
            )
        if self.resources_per_worker:
            bad = {k: v for k, v in self.resources_per_worker.items() if v < 0}
            if bad:
                raise ValueError(f"ScalingConfig(resources_per_worker={bad}): amounts must be >= 0.")
            if not self.use_gpu and self.resources_per_worker.get("GPU", 0) > 0:
                warnings.warn(
                    f"ScalingConfig(use_gpu=False, resources_per_worker={self.resources_per_worker}): "
                    "ignoring the GPU entry and training on CPU. Set use_gpu=True to train on GPUs.",
                    stacklevel=3,
                )

    @property
    def _num_workers(self) -> int:
        return self.num_workers or 1

    @property
    def _resources_per_worker_not_none(self) -> dict[str, float]:
        """The resources one worker's bundle reserves (never empty)."""
        res = dict(self.resources_per_worker or {})
        if not self.use_gpu:
            res.pop("GPU", None)
        res.setdefault("CPU", 1.0)
        if self.use_gpu:
            res.setdefault("GPU", 1.0)
        if self.accelerator_type:
            res.setdefault(f"accelerator_type:{self.accelerator_type}", 0.001)
        return {k: float(v) for k, v in res.items() if v > 0}

    @property
    def num_cpus_per_worker(self) -> float:
        return self._resources_per_worker_not_none.get("CPU", 0.0)

    @property
    def num_gpus_per_worker(self) -> float:
        return self._resources_per_worker_not_none.get("GPU", 0.0)

    @property
    def additional_resources_per_worker(self) -> dict[str, float]:
        return {
            k: v for k, v in self._resources_per_worker_not_none.items() if k not in ("CPU", "GPU")
        }

    @property
    def total_resources(self) -> dict[str, float]:
        """Everything the whole worker group reserves."""
        per = self._resources_per_worker_not_none
        return {k: v * self._num_workers for k, v in per.items()}

    def as_placement_group_factory(self) -> list[dict[str, float]]:
        """One bundle per worker, in rank order."""
        return [dict(self._resources_per_worker_not_none) for _ in range(self._num_workers)]


@dataclass
class CheckpointConfig:
    """Which checkpoints stay on storage.

    With ``num_to_keep`` set, exactly that many stay: the best by
    ``checkpoint_score_attribute`` (in ``checkpoint_score_order``), or the most recent
    when no attribute is given. ``None`` keeps every checkpoint.

    ``checkpoint_frequency`` and ``checkpoint_at_end`` are accepted so Ray code runs,
    but, as in Ray, they only drive trainers without a user loop; with a loop function
    (TorchTrainer) the loop checkpoints when it passes ``checkpoint=`` to ``report``,
    and ``fit()`` warns that these two options have no effect.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and self.num_to_keep < 1:
            raise ValueError(
                f"CheckpointConfig(num_to_keep={self.num_to_keep}): must be None (keep all) or >= 1."
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): "
                "use 'max' or 'min'."
            )


@dataclass
class FailureConfig:
    """How many times the whole worker group restarts after a failure (-1: no limit)."""

    max_failures: int = 0
    fail_fast: bool | str = False

    def __post_init__(self) -> None:
        if self.max_failures < -1:
            raise ValueError(
                f"FailureConfig(max_failures={self.max_failures}): use -1 (no limit), 0 or more."
            )


@dataclass
class SyncConfig:
    """Accepted for compatibility; raylite persists checkpoints when they are reported."""

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False


@dataclass
class RunConfig:
    """Where results go and how the run behaves.

    ``storage_path`` is a local path or any fsspec URI (``s3://``, ``gs://``,
    ``file://``); results land in ``storage_path/name``. ``verbose``: 0 silent,
    1 a line per report (default), 2 also worker-group events. ``callbacks``: objects
    called on the driver, either Ray Train ``UserCallback``s (``after_report``,
    ``after_exception``) or Tune-style ones (``on_trial_result`` ...); see
    ``raylite.train._internal.callbacks``.
    """

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: Any = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    sync_config: SyncConfig | None = None
    verbose: int | None = None
    stop: Any = None
    callbacks: Sequence[Any] | None = None
    progress_reporter: Any = None
    log_to_file: bool | str = False

    def __post_init__(self) -> None:
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.storage_path is not None and not isinstance(self.storage_path, str):
            self.storage_path = str(self.storage_path)  # accept pathlib.Path, as Ray does


@dataclass
class DataConfig:
    """Which of the trainer's datasets are split across workers (the rest go whole to each)."""

    datasets_to_split: Literal["all"] | list[str] = "all"
    execution_options: Any = None
    enable_shard_locality: bool = True

    def should_split(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split


@dataclass
class BackendConfig:
    """Base of per-framework settings (TorchConfig); the plain one sets nothing up."""

    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def backend_name(self) -> str | None:
        return None
