"""``RayTrainReportCallback`` for ``xgboost.train``: metrics each round, the model as a checkpoint.

Ray's contract: every boosting round reports the flattened evaluation log
(``"validation-logloss"``); every ``frequency`` rounds, and once at the end unless
``checkpoint_at_end=False``, the report carries a checkpoint holding the booster in
``filename`` (``model.ubj``), saved by rank 0 only. ``get_model`` reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from raylite.train._internal.gbdt import GBDTReportCallbackBase, MetricsSpec, flatten_metrics
from raylite.train.checkpoint import Checkpoint

try:
    import xgboost
    from xgboost.callback import TrainingCallback
except ImportError as e:  # pragma: no cover - exercised where xgboost is absent
    raise ImportError(
        "raylite.train.xgboost needs the xgboost package: pip install xgboost"
    ) from e


class RayTrainReportCallback(GBDTReportCallbackBase, TrainingCallback):
    """XGBoost callback that reports metrics (and checkpoints) to Ray Train.

    ``metrics``: one name, a list of names, or ``{reported_name: xgboost_key}`` to pick
    and rename from the flattened log (``"<eval name>-<metric>"``); all by default.
    """

    CHECKPOINT_NAME = "model.ubj"

    def __init__(
        self,
        metrics: MetricsSpec = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        GBDTReportCallbackBase.__init__(
            self, metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn
        )
        TrainingCallback.__init__(self)
        self._evals_log: Any = None
        self._last_checkpoint_iteration: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> xgboost.Booster:
        """The booster saved in ``checkpoint`` by this callback (same ``filename``)."""
        with checkpoint.as_directory() as directory:
            path = Path(directory, filename)
            if not path.exists():
                raise FileNotFoundError(
                    f"{checkpoint} holds no {filename!r}; pass the filename= the callback saved "
                    f"with (the checkpoint holds {sorted(p.name for p in Path(directory).iterdir())})."
                )
            booster = xgboost.Booster()
            booster.load_model(path.as_posix())
            return booster

    def _save_model(self, model: Any, path: str) -> None:
        model.save_model(path)

    def _report_dict(self, evals_log: Any) -> dict[str, Any]:
        flat = flatten_metrics(evals_log or {})
        last = {k: (v[-1] if isinstance(v, (list, tuple)) and v else v) for k, v in flat.items()}
        return self._select(last)

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        self._evals_log = evals_log
        report_dict = self._report_dict(evals_log)
        if self._due(epoch):
            self._last_checkpoint_iteration = epoch
            self._save_and_report_checkpoint(report_dict, model)
        else:
            self._report_metrics(report_dict)
        return False  # never ask xgboost to stop early

    def after_training(self, model: Any) -> Any:
        if not self._checkpoint_at_end:
            return model
        if (
            self._last_checkpoint_iteration is not None
            and model.num_boosted_rounds() - 1 == self._last_checkpoint_iteration
        ):
            return model  # the last round's checkpoint is already the final model
        report_dict = self._report_dict(self._evals_log) if self._evals_log else {}
        self._save_and_report_checkpoint(report_dict, model)
        return model
