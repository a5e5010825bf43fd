"""XGBoostTrainer: the user's xgboost loop on N workers joined in XGBoost's collective."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raylite.train._internal.gbdt_trainer import GBDTTrainer, refuse_legacy_form
from raylite.train._internal.messages import WorkerMetadata
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import DataConfig, RunConfig, ScalingConfig
from raylite.train.xgboost._xgboost_utils import RayTrainReportCallback
from raylite.train.xgboost.config import XGBoostConfig, XGBoostRabitBackend


class XGBoostTrainer(GBDTTrainer):
    """Distributed data-parallel XGBoost.

    Inside ``train_loop_per_worker``, read ``train.get_dataset_shard("train")``, build a
    ``DMatrix`` from this rank's rows and call ``xgboost.train(...,
    callbacks=[RayTrainReportCallback()])``: the trainer has already joined every rank
    to XGBoost's collective, so the ranks grow one model together.
    """

    _trainer_name = "XGBoostTrainer"
    _callback_cls = RayTrainReportCallback

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        xgboost_config: XGBoostConfig | None = None,
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
        refuse_legacy_form("XGBoostTrainer", label_column, params, num_boost_round)
        if xgboost_config is not None and not isinstance(xgboost_config, XGBoostConfig):
            raise TypeError(
                "XGBoostTrainer(xgboost_config=...) needs an XGBoostConfig, got "
                f"{type(xgboost_config).__name__}."
            )
        super().__init__(
            train_loop_per_worker,
            backend_config=xgboost_config or XGBoostConfig(),
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
        def make(rank0: WorkerMetadata) -> XGBoostRabitBackend:
            return XGBoostRabitBackend(rank0.node_ip, rank0.free_port)

        return make
