"""The shape both GBDT trainers share: a DataParallelTrainer with a framework backend.

Ray 2.60's XGBoostTrainer and LightGBMTrainer take only the ``train_loop_per_worker``
form; the older ``params=``/``label_column=``/``num_boost_round=`` arguments are still
in the signature but raise, and ``Trainer.get_model`` points at the callback's
``get_model``. raylite refuses the legacy arguments the same way (with the rewrite
spelled out) but keeps ``get_model`` working, with a DeprecationWarning, since a
script calling it has only one meaning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from raylite.train.checkpoint import Checkpoint
from raylite.train.config import BackendConfig, DataConfig, RunConfig, ScalingConfig
from raylite.train.data_parallel_trainer import DataParallelTrainer


def refuse_legacy_form(trainer: str, label_column: Any, params: Any, num_boost_round: Any) -> None:
    given = [
        name
        for name, value in (
            ("label_column", label_column),
            ("params", params),
            ("num_boost_round", num_boost_round),
        )
        if value is not None
    ]
    if given:
        raise DeprecationWarning(
            f"{trainer}({', '.join(f'{g}=...' for g in given)}): the legacy {trainer} API is "
            "deprecated in Ray 2.60 and raylite alike. Pass a train_loop_per_worker function "
            "that reads train.get_dataset_shard('train'), builds the library's dataset from "
            "it and calls the library's train() with callbacks=[RayTrainReportCallback()]. "
            "See https://github.com/ray-project/ray/issues/50042."
        )


class GBDTTrainer(DataParallelTrainer):
    """Base of XGBoostTrainer / LightGBMTrainer (not public)."""

    _callback_cls: Any = None  # the framework's RayTrainReportCallback, for get_model

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        backend_config: BackendConfig,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        validation_config: Any = None,
        metadata: dict[str, Any] | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
    ) -> None:
        if validation_config is not None:
            raise NotImplementedError(
                f"{self._trainer_name}(validation_config=...) is not in raylite yet: validate "
                "inside the training loop (evals=/valid_sets=) and report the metric instead."
            )
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=backend_config,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
        )

    @classmethod
    def get_model(cls, checkpoint: Checkpoint) -> Any:
        """[Deprecated] The model in ``checkpoint``; use ``RayTrainReportCallback.get_model``."""
        warnings.warn(
            f"`{cls.__name__}.get_model` is deprecated (Ray 2.60 raises here). "
            "Use `RayTrainReportCallback.get_model` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls._callback_cls.get_model(checkpoint)
