"""LightGBMTrainer: the user's lightgbm loop on N workers joined in LightGBM's socket network."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raylite.train._internal.gbdt_trainer import GBDTTrainer, refuse_legacy_form
from raylite.train._internal.messages import WorkerMetadata
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import DataConfig, RunConfig, ScalingConfig
from raylite.train.lightgbm._lightgbm_utils import RayTrainReportCallback
from raylite.train.lightgbm.config import LightGBMBackend, LightGBMConfig


class LightGBMTrainer(GBDTTrainer):
    """Distributed data-parallel LightGBM.

    Inside ``train_loop_per_worker``, build a ``lightgbm.Dataset`` from
    ``train.get_dataset_shard("train")`` and call ``lightgbm.train({...,
    "tree_learner": "data_parallel", "pre_partition": True, **get_network_params()},
    ..., callbacks=[RayTrainReportCallback()])``.
    """

    _trainer_name = "LightGBMTrainer"
    _callback_cls = RayTrainReportCallback

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        lightgbm_config: LightGBMConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        validation_config: Any = None,
        metadata: dict[str, Any] | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        label_column: str | None = None,
        params: dict[str, Any] | None = None,
        num_boost_round: int | None = None,
    ) -> None:
        refuse_legacy_form("LightGBMTrainer", label_column, params, num_boost_round)
        if lightgbm_config is not None and not isinstance(lightgbm_config, LightGBMConfig):
            raise TypeError(
                "LightGBMTrainer(lightgbm_config=...) needs a LightGBMConfig, got "
                f"{type(lightgbm_config).__name__}."
            )
        super().__init__(
            train_loop_per_worker,
            backend_config=lightgbm_config or LightGBMConfig(),
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            validation_config=validation_config,
            metadata=metadata,
            resume_from_checkpoint=resume_from_checkpoint,
        )

    def _backend_factory(self) -> Callable[[WorkerMetadata], Any]:
        def make(rank0: WorkerMetadata) -> LightGBMBackend:
            return LightGBMBackend()

        return make
