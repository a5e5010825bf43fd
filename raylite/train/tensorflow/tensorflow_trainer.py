"""TensorflowTrainer: a TensorFlow/Keras loop on N workers with TF_CONFIG set for each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raylite.train._internal.messages import WorkerMetadata
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import DataConfig, RunConfig, ScalingConfig
from raylite.train.data_parallel_trainer import DataParallelTrainer
from raylite.train.tensorflow.config import TensorflowBackend, TensorflowConfig


class TensorflowTrainer(DataParallelTrainer):
    """Build ``tf.distribute.MultiWorkerMirroredStrategy()`` inside the loop: every rank's
    ``TF_CONFIG`` already lists the group, so the strategy connects the ranks itself."""

    _trainer_name = "TensorflowTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        tensorflow_config: TensorflowConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        metadata: dict[str, Any] | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
    ) -> None:
        if tensorflow_config is not None and not isinstance(tensorflow_config, TensorflowConfig):
            raise TypeError("TensorflowTrainer(tensorflow_config=...) needs a TensorflowConfig, got "
                            f"{type(tensorflow_config).__name__}.")
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=tensorflow_config or TensorflowConfig(),
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
        )

    def _backend_factory(self) -> Callable[[WorkerMetadata], Any]:
        def make(rank0: WorkerMetadata) -> TensorflowBackend:
            return TensorflowBackend()

        return make
