"""Helpers called inside a TorchTrainer loop: device placement, DDP/FSDP, data sharding."""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from raylite.train._internal.session import get_session
from raylite.train._internal.torch_backend import device_for, wrap_model


def _world() -> tuple[int, int]:
    session = get_session()
    if session is None:
        return 1, 0
    return session.context.get_world_size(), session.context.get_world_rank()


def get_device() -> torch.device:
    """The device this worker should train on: its GPU with use_gpu, else the CPU."""
    session = get_session()
    if session is None:
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return device_for(session.spec.use_gpu)


def get_devices() -> list[torch.device]:
    """All devices of this worker (one per worker in raylite)."""
    return [get_device()]


def prepare_model(
    model: torch.nn.Module,
    move_to_device: bool | torch.device = True,
    parallel_strategy: str | None = "ddp",
    parallel_strategy_kwargs: dict[str, Any] | None = None,
    *,
    wrap_ddp: bool | None = None,
    ddp_kwargs: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """Move ``model`` to this worker's device and wrap it in DDP (or FSDP).

    With a single worker the model is returned unwrapped, as in Ray. ``wrap_ddp`` and
    ``ddp_kwargs`` are Ray's older spellings of ``parallel_strategy`` and its kwargs.
    """
    if _wrapped_already(model):
        return model
    if wrap_ddp is False:
        parallel_strategy = None
    if ddp_kwargs:
        parallel_strategy_kwargs = {**ddp_kwargs, **(parallel_strategy_kwargs or {})}
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device is not False:
        model = model.to(device)
    return wrap_model(model, device, parallel_strategy, parallel_strategy_kwargs)


def _wrapped_already(model: torch.nn.Module) -> bool:
    """A DeepSpeed engine (it partitions, places and offloads its own parameters: moving or
    DDP-wrapping it would undo ZeRO) or a model already in DDP/FSDP is left as it is."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return True
    return any(cls.__module__.split(".")[0] == "deepspeed" or cls.__name__ == "FullyShardedDataParallel"
               for cls in type(model).__mro__)


def prepare_data_loader(
    data_loader: DataLoader,
    add_dist_sampler: bool = True,
    move_to_device: bool = True,
    auto_transfer: bool = True,
) -> DataLoader:
    """Give each worker a disjoint shard (DistributedSampler) and move batches to its device.

    The original loader's shuffle setting carries over (a RandomSampler becomes a
    shuffling DistributedSampler); call ``loader.sampler.set_epoch(epoch)`` for a new
    order each epoch, as with plain DDP.
    """
    world_size, rank = _world()
    if add_dist_sampler and world_size > 1:
        data_loader = _with_distributed_sampler(data_loader, world_size, rank)
    device = get_device()
    if move_to_device and device.type != "cpu":
        data_loader = _DeviceDataLoader(data_loader, device, auto_transfer)
    return data_loader


def _with_distributed_sampler(loader: DataLoader, world_size: int, rank: int) -> DataLoader:
    if isinstance(loader.sampler, DistributedSampler):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        warnings.warn(
            "prepare_data_loader: an IterableDataset cannot be split by a sampler; every worker "
            "reads all of it. Shard it yourself with train.get_context().get_world_rank().",
            stacklevel=3,
        )
        return loader
    if not isinstance(loader.batch_sampler, BatchSampler) or not isinstance(
        loader.sampler, (RandomSampler, SequentialSampler)
    ):
        warnings.warn(
            "prepare_data_loader: the DataLoader uses a custom sampler, which is kept as is; "
            "every worker sees the data it yields.",
            stacklevel=3,
        )
        return loader
    shuffle = isinstance(loader.sampler, RandomSampler)
    sampler: DistributedSampler[Any] = DistributedSampler(
        loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle
    )
    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        kwargs["multiprocessing_context"] = loader.multiprocessing_context
    return DataLoader(loader.dataset, **kwargs)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return type(batch)({k: _to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


class _DeviceDataLoader(DataLoader):
    """The same loader (sampler, len, attributes) yielding batches already on ``device``."""

    def __init__(self, base: DataLoader, device: torch.device, auto_transfer: bool) -> None:
        self.__dict__.update(base.__dict__)  # share the base's state; no re-validation
        self._raylite_device = device

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        for batch in super().__iter__():
            yield _to_device(batch, self._raylite_device)


def enable_reproducibility(seed: int = 0) -> None:
    """Seed every RNG and ask torch for deterministic kernels (slower; for debugging)."""
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Kept for Ray compatibility: nothing to do without AMP."""
    return optimizer


def backward(tensor: torch.Tensor) -> None:
    """Kept for Ray compatibility: ``tensor.backward()``."""
    tensor.backward()
