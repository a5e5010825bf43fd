"""``ReportCheckpointCallback``: Keras metrics (and the model as a checkpoint) to Ray Train.

At each hook named in ``report_metrics_on`` (default ``epoch_end``) the Keras logs
are reported; at each hook in ``checkpoint_on`` (default ``epoch_end``) the model is
saved with ``TensorflowCheckpoint.from_model`` and reported with the metrics.
"""

from __future__ import annotations

import shutil
from typing import Any

import tensorflow as tf

from raylite.train._internal.session import report
from raylite.train.tensorflow.tensorflow_checkpoint import TensorflowCheckpoint

_HOOKS = ("epoch_begin", "epoch_end", "train_batch_begin", "train_batch_end", "test_batch_begin",
          "test_batch_end", "predict_batch_begin", "predict_batch_end", "train_begin", "train_end",
          "test_begin", "test_end", "predict_begin", "predict_end")


class ReportCheckpointCallback(tf.keras.callbacks.Callback):
    """Report Keras logs each ``report_metrics_on`` event, checkpoints each ``checkpoint_on``."""

    def __init__(self, checkpoint_on: str | list[str] = "epoch_end",
                 report_metrics_on: str | list[str] = "epoch_end",
                 metrics: str | list[str] | dict[str, str] | None = None) -> None:
        super().__init__()
        self._checkpoint_on = [checkpoint_on] if isinstance(checkpoint_on, str) else list(checkpoint_on)
        self._report_on = [report_metrics_on] if isinstance(report_metrics_on, str) else list(report_metrics_on)
        for hook in self._checkpoint_on + self._report_on:
            if hook not in _HOOKS:
                raise ValueError(f"ReportCheckpointCallback: {hook!r} is not a Keras hook; use one of "
                                 f"{', '.join(_HOOKS)}.")
        self._metrics = metrics
        for hook in set(self._checkpoint_on + self._report_on):
            setattr(self, f"on_{hook}", self._hook(hook))

    def _hook(self, when: str) -> Any:
        def handle(*args: Any) -> None:
            logs = args[-1] if args and isinstance(args[-1], dict) else {}
            self._handle(dict(logs or {}), when)

        return handle

    def _selected(self, logs: dict[str, Any]) -> dict[str, Any]:
        spec = self._metrics
        if spec is None:
            return logs
        if isinstance(spec, str):
            spec = [spec]
        pairs = spec.items() if isinstance(spec, dict) else ((m, m) for m in spec)
        out = {}
        for key, source in pairs:
            if source not in logs:
                raise KeyError(f"ReportCheckpointCallback(metrics=...) asks for {source!r}; Keras "
                               f"logged {sorted(logs)}.")
            out[key] = logs[source]
        return out

    def _handle(self, logs: dict[str, Any], when: str) -> None:
        metrics = {k: float(v) if hasattr(v, "__float__") else v for k, v in self._selected(logs).items()}
        if when in self._checkpoint_on:
            checkpoint = TensorflowCheckpoint.from_model(self.model)
            try:
                report(metrics, checkpoint=checkpoint)
            finally:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        else:
            report(metrics)
