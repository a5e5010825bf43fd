"""Lightning pieces that let a ``pl.Trainer`` run inside a TorchTrainer worker.

raylite has already joined the process group and knows every rank, so the strategy
only has to take its device and sampler settings from the train context, and the
cluster environment tells Lightning the ranks instead of launching processes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from typing import Any

import torch

from raylite import train
from raylite.train.checkpoint import Checkpoint
from raylite.train.torch.train_loop_utils import get_device

try:  # the unified package first, the standalone one as a fallback (Ray does the same)
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.environments import LightningEnvironment
    from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy
except ImportError:  # pragma: no cover - depends on what is installed
    import pytorch_lightning as pl  # type: ignore[no-redef,assignment]
    from pytorch_lightning.plugins.environments import LightningEnvironment  # type: ignore[no-redef,assignment]
    from pytorch_lightning.strategies import (  # type: ignore[no-redef,assignment]
        DDPStrategy,
        DeepSpeedStrategy,
        FSDPStrategy,
    )

CHECKPOINT_NAME = "checkpoint.ckpt"


def _context() -> Any:
    return train.get_context()


class _RayStrategyMixin:
    """Device and sampler from the train context; the process group is already up."""

    @property
    def root_device(self) -> torch.device:
        return get_device()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        ctx = _context()
        return {"num_replicas": ctx.get_world_size(), "rank": ctx.get_world_rank()}


class RayDDPStrategy(_RayStrategyMixin, DDPStrategy):  # type: ignore[misc]
    """DDPStrategy for a TorchTrainer worker: ``pl.Trainer(strategy=RayDDPStrategy())``."""


class RayFSDPStrategy(_RayStrategyMixin, FSDPStrategy):  # type: ignore[misc]
    """FSDPStrategy for a TorchTrainer worker."""


class RayDeepSpeedStrategy(_RayStrategyMixin, DeepSpeedStrategy):  # type: ignore[misc]
    """DeepSpeedStrategy for a TorchTrainer worker (needs ``deepspeed`` installed)."""


class RayLightningEnvironment(LightningEnvironment):  # type: ignore[misc]
    """Ranks and world size from raylite; Lightning must not start processes itself."""

    def world_size(self) -> int:
        return _context().get_world_size()

    def global_rank(self) -> int:
        return _context().get_world_rank()

    def local_rank(self) -> int:
        return _context().get_local_rank()

    def node_rank(self) -> int:
        return _context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        pass  # fixed by the TorchTrainer

    def set_global_rank(self, rank: int) -> None:
        pass  # fixed by the TorchTrainer

    @property
    def creates_processes_externally(self) -> bool:
        return True

    def teardown(self) -> None:
        pass  # keep the rendezvous variables: they belong to the worker, not to Lightning


class RayTrainReportCallback(pl.Callback):  # type: ignore[misc]
    """Report the logged metrics and a Lightning checkpoint at the end of every epoch."""

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        metrics: dict[str, Any] = {}
        for key, value in trainer.callback_metrics.items():
            metrics[key] = value.item() if isinstance(value, torch.Tensor) else value
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        tmpdir = tempfile.mkdtemp(prefix="raylite_lightning_")
        try:
            # Every rank must call save_checkpoint (it synchronizes); rank 0 writes the file.
            trainer.save_checkpoint(os.path.join(tmpdir, CHECKPOINT_NAME), weights_only=False)
            has_files = bool(os.listdir(tmpdir))
            checkpoint = Checkpoint.from_directory(tmpdir) if has_files else None
            train.report(metrics, checkpoint=checkpoint)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)


def prepare_trainer(trainer: Any) -> Any:
    """Check that ``trainer`` uses raylite's strategy and environment; return it."""
    strategy = getattr(trainer, "strategy", None)
    if not isinstance(strategy, _RayStrategyMixin):
        warnings.warn(
            f"prepare_trainer: the trainer's strategy is {type(strategy).__name__}; use "
            "RayDDPStrategy, RayFSDPStrategy or RayDeepSpeedStrategy so Lightning uses the "
            "process group and ranks raylite set up.",
            stacklevel=2,
        )
    env = getattr(strategy, "cluster_environment", None)
    if env is not None and not isinstance(env, RayLightningEnvironment):
        warnings.warn(
            "prepare_trainer: add plugins=[RayLightningEnvironment()] to pl.Trainer so Lightning "
            "takes its ranks from raylite instead of launching processes.",
            stacklevel=2,
        )
    return trainer
