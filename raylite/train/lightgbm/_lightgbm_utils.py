"""``RayTrainReportCallback`` for ``lightgbm.train``: metrics each round, the model as a checkpoint.

LightGBM calls the callback with a ``CallbackEnv`` after every round; its
``evaluation_result_list`` entries are ``(data_name, metric, value, bigger_is_better)``
(``lightgbm.cv`` adds a standard deviation, reported as ``-mean``/``-stdv``). The
report is ``{"<data_name>-<metric>": value}``; the last round (unless
``checkpoint_at_end=False``) and every ``frequency`` rounds carry the model
(``model.txt``), saved by rank 0 only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from raylite.train._internal.gbdt import GBDTReportCallbackBase, MetricsSpec, flatten_metrics
from raylite.train.checkpoint import Checkpoint

try:
    import lightgbm
except ImportError as e:  # pragma: no cover - exercised where lightgbm is absent
    raise ImportError(
        "raylite.train.lightgbm needs the lightgbm package: pip install lightgbm"
    ) from e


class RayTrainReportCallback(GBDTReportCallbackBase):
    """LightGBM callback that reports metrics (and checkpoints) to Ray Train."""

    CHECKPOINT_NAME = "model.txt"

    def __init__(
        self,
        metrics: MetricsSpec = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> lightgbm.Booster:
        """The booster saved in ``checkpoint`` by this callback (same ``filename``)."""
        with checkpoint.as_directory() as directory:
            path = Path(directory, filename)
            if not path.exists():
                raise FileNotFoundError(
                    f"{checkpoint} holds no {filename!r}; pass the filename= the callback saved "
                    f"with (the checkpoint holds {sorted(p.name for p in Path(directory).iterdir())})."
                )
            return lightgbm.Booster(model_file=path.as_posix())

    def _save_model(self, model: Any, path: str) -> None:
        model.save_model(path)

    @staticmethod
    def _eval_result(env: Any) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for entry in env.evaluation_result_list or []:
            data_name, metric, value = entry[0:3]
            bucket = out.setdefault(data_name, {})
            if len(entry) > 4:  # lightgbm.cv: (name, metric, mean, bigger_better, stdv)
                bucket[f"{metric}-mean"] = value
                bucket[f"{metric}-stdv"] = entry[4]
            else:
                bucket[metric] = value
        return out

    def __call__(self, env: Any) -> None:
        report_dict = self._select(flatten_metrics(self._eval_result(env)))
        last_round = env.iteration == env.end_iteration - 1
        if (last_round and self._checkpoint_at_end) or self._due(env.iteration):
            self._save_and_report_checkpoint(report_dict, env.model)
        else:
            self._report_metrics(report_dict)
