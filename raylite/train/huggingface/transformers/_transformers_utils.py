"""Glue between ``transformers.Trainer`` and a TorchTrainer worker.

The Trainer finds the process group raylite started (through the torchrun-style
environment variables), so only two things are needed: a callback that reports each
saved checkpoint, and ``prepare_trainer`` so a raylite.data shard can be the Trainer's
dataset (it streams batches; each worker already holds only its own shard).
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch
from transformers.trainer_callback import TrainerCallback

from raylite import train
from raylite.train.checkpoint import Checkpoint

CHECKPOINT_NAME = "checkpoint"


class RayTrainReportCallback(TrainerCallback):  # type: ignore[misc]
    """On every save, report the latest logged metrics with the saved checkpoint folder."""

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        metrics: dict[str, Any] = {}
        for entry in state.log_history:  # later entries override earlier ones
            metrics.update(entry)
        metrics["step"] = state.global_step
        metrics["epoch"] = state.epoch
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        # Only the main process writes the folder; the other ranks report metrics alone.
        checkpoint = Checkpoint.from_directory(folder) if os.path.isdir(folder) else None
        train.report(metrics, checkpoint=checkpoint)


class _ShardIterable(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """A raylite.data shard as a torch IterableDataset of ready-made batches."""

    def __init__(self, shard: Any, batch_size: int, collate_fn: Any = None) -> None:
        self._shard = shard
        self._batch_size = batch_size
        self._collate_fn = collate_fn

    def __iter__(self) -> Any:
        kwargs: dict[str, Any] = {"batch_size": self._batch_size}
        if self._collate_fn is not None:
            kwargs["collate_fn"] = self._collate_fn
        for batch in self._shard.iter_torch_batches(**kwargs):
            yield _tensors(batch) if isinstance(batch, dict) else batch


def _tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Columns of equal-length sequences can arrive as numpy object arrays (one array
    per row); the model wants one tensor, so stack them."""
    import numpy

    out = {}
    for key, value in batch.items():
        if isinstance(value, numpy.ndarray) and value.dtype == object:
            try:
                value = torch.as_tensor(numpy.stack([numpy.asarray(v) for v in value]))
            except (ValueError, TypeError):
                pass  # ragged or not numeric: leave it to the model's collator
        out[key] = value
    return out


def _is_shard(dataset: Any) -> bool:
    return dataset is not None and hasattr(dataset, "iter_torch_batches")


def prepare_trainer(trainer: Any) -> Any:
    """Let ``trainer`` train on raylite.data shards (``train.get_dataset_shard``).

    Datasets that are not raylite.data shards are left alone. A shard has no length,
    so set ``TrainingArguments(max_steps=...)``, as with any streaming dataset.
    """

    def loader(dataset: Any, batch_size: int) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        # batch_size=None: the shard yields whole batches; no second sharding by
        # accelerate either, since every worker already reads only its own shard.
        return torch.utils.data.DataLoader(_ShardIterable(dataset, batch_size), batch_size=None)

    if _is_shard(trainer.train_dataset):

        def get_train_dataloader(self: Any) -> Any:
            return loader(self.train_dataset, self.args.per_device_train_batch_size)

        trainer.get_train_dataloader = types.MethodType(get_train_dataloader, trainer)

    if _is_shard(trainer.eval_dataset):

        def get_eval_dataloader(self: Any, eval_dataset: Any = None) -> Any:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
            if not _is_shard(dataset):
                return type(self).get_eval_dataloader(self, eval_dataset)
            return loader(dataset, self.args.per_device_eval_batch_size)

        trainer.get_eval_dataloader = types.MethodType(get_eval_dataloader, trainer)
    return trainer
