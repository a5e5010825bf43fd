"""TorchTrainer: DataParallelTrainer whose workers join a torch.distributed process group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raylite.train._internal.messages import WorkerMetadata
from raylite.train._internal.torch_backend import TorchBackend, resolve_backend
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import DataConfig, RunConfig, ScalingConfig
from raylite.train.data_parallel_trainer import DataParallelTrainer
from raylite.train.torch.config import TorchConfig


class TorchTrainer(DataParallelTrainer):
    """Runs a PyTorch training loop on N workers with DDP set up (gloo on CPU, NCCL on GPU).

    Inside the loop use ``prepare_model``, ``prepare_data_loader``, ``train.report`` and
    ``train.get_checkpoint``; no ``init_process_group`` or rank handling is needed.

    Before the loop starts, every worker has joined the process group and exported the
    torchrun variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, NODE_RANK), so libraries that bring their own engine work unchanged:
    call ``deepspeed.initialize(model=..., config=...)`` (or build a ``transformers`` or
    Lightning trainer) inside the loop, with no launcher. On CPU-only machines pick a
    plain torch optimizer in the DeepSpeed config (e.g. ``{"type": "Adam", "params":
    {"torch_adam": True}}``), since DeepSpeed's fused ones need CUDA.
    """

    _trainer_name = "TorchTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        torch_config: TorchConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise TypeError(
                f"TorchTrainer(torch_config=...) needs a TorchConfig, got {type(torch_config).__name__}."
            )
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=torch_config or TorchConfig(),
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
        )
        # Decide gloo/NCCL now, so a mismatch is reported at the line that built the trainer.
        resolve_backend(self.torch_config.backend, self.scaling_config.use_gpu)

    @property
    def torch_config(self) -> TorchConfig:
        config = self.backend_config
        assert isinstance(config, TorchConfig)
        return config

    def _backend_factory(self) -> Callable[[WorkerMetadata], Any]:
        config = self.torch_config
        backend = resolve_backend(config.backend, self.scaling_config.use_gpu, warn=False)

        def make(rank0: WorkerMetadata) -> TorchBackend:
            return TorchBackend(
                backend, rank0.node_ip, rank0.free_port, float(config.timeout_s), config.init_method
            )

        return make
