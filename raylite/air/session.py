"""`ray.air.session`: the older spelling of report / get_checkpoint / get_context's fields,
working inside a Tune trial and inside a Train worker alike."""

from __future__ import annotations

from typing import Any

import raylite.train as _train


def report(metrics: dict, *, checkpoint: Any = None) -> None:
    """Report metrics (and optionally a checkpoint) from a Tune trial or a Train worker."""
    _train.report(metrics, checkpoint=checkpoint)


def get_checkpoint() -> Any:
    return _train.get_checkpoint()


def _context() -> Any:
    return _train.get_context()


def get_trial_id() -> str:
    return _context().get_trial_id()


def get_trial_name() -> str:
    return _context().get_trial_name()


def get_trial_dir() -> str:
    return _context().get_trial_dir()


def get_trial_resources() -> Any:
    return _context().get_trial_resources()


def get_experiment_name() -> str:
    return _context().get_experiment_name()


def get_world_size() -> int:
    return _context().get_world_size()


def get_world_rank() -> int:
    return _context().get_world_rank()


def get_local_rank() -> int:
    return _context().get_local_rank()


def get_local_world_size() -> int:
    return _context().get_local_world_size()


def get_node_rank() -> int:
    return _context().get_node_rank()


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    return _train.get_dataset_shard(dataset_name or "train")


__all__ = ["get_checkpoint", "get_dataset_shard", "get_experiment_name", "get_local_rank",
           "get_local_world_size", "get_node_rank", "get_trial_dir", "get_trial_id",
           "get_trial_name", "get_trial_resources", "get_world_rank", "get_world_size",
           "report"]
