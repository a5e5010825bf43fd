"""What the XGBoost and LightGBM integrations share: the report callback's bookkeeping.

Both libraries hand their callback a nested evaluation log
(``{"validation": {"logloss": [...]}}``); Ray reports it flattened as
``"validation-logloss"``, optionally picked or renamed through ``metrics=``, and saves
the booster into a checkpoint on rank 0 only (every rank holds the same trees after
an allreduce round, so one copy is enough). The library-specific callbacks in
``raylite.train.xgboost`` / ``raylite.train.lightgbm`` add only the hook each library
calls and the way it saves a model.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from raylite.train._internal.session import WorkerSpec, get_session, report
from raylite.train.checkpoint import Checkpoint

MetricsSpec = str | list[str] | dict[str, str] | None


def flatten_metrics(nested: Mapping[str, Any], delimiter: str = "-") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a-b": 1}`` (any depth)."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, Mapping):
            for inner_key, inner in flatten_metrics(value, delimiter).items():
                out[f"{key}{delimiter}{inner_key}"] = inner
        else:
            out[str(key)] = value
    return out


class GBDTReportCallbackBase:
    """Metric selection, checkpoint frequency and rank-0 saving shared by both libraries."""

    CHECKPOINT_NAME = "model"

    def __init__(
        self,
        metrics: MetricsSpec = None,
        filename: str | None = None,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        if isinstance(metrics, str):
            metrics = [metrics]
        if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
            raise TypeError(
                f"{type(self).__name__}(metrics=...) takes a metric name, a list of names or a "
                f"dict {{reported_name: library_metric}}, got {type(metrics).__name__}."
            )
        if not isinstance(frequency, int) or frequency < 0:
            raise ValueError(
                f"{type(self).__name__}(frequency={frequency!r}): use 0 (no checkpoints during "
                "training) or a positive number of boosting rounds."
            )
        self._metrics = metrics
        self._filename = filename or self.CHECKPOINT_NAME
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._results_postprocessing_fn = results_postprocessing_fn

    # -- metrics -------------------------------------------------------------------
    def _select(self, flat: dict[str, Any]) -> dict[str, Any]:
        if not self._metrics:
            chosen = dict(flat)
        else:
            chosen = {}
            for key in self._metrics:
                source = self._metrics[key] if isinstance(self._metrics, dict) else key
                if source not in flat:
                    raise KeyError(
                        f"{type(self).__name__}(metrics=...) asks for {source!r}, which this "
                        f"boosting round did not log; logged: {sorted(flat) or 'nothing'} "
                        "(pass evals=/valid_sets= to log validation metrics)."
                    )
                chosen[key] = flat[source]
        if self._results_postprocessing_fn is not None:
            chosen = self._results_postprocessing_fn(chosen)
        return chosen

    def _due(self, iteration: int) -> bool:
        return self._frequency > 0 and (iteration + 1) % self._frequency == 0

    # -- reporting -----------------------------------------------------------------
    def _save_model(self, model: Any, path: str) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def _get_checkpoint(self, model: Any) -> Iterator[Checkpoint | None]:
        """A checkpoint of ``model`` on rank 0 (or outside Train, e.g. under Tune); None
        elsewhere."""
        session = get_session()
        rank = session.context.get_world_rank() if session is not None else None
        if rank not in (0, None):
            yield None
            return
        with tempfile.TemporaryDirectory(prefix="raylite_gbdt_") as tmp:
            self._save_model(model, Path(tmp, self._filename).as_posix())
            yield Checkpoint.from_directory(tmp)

    def _save_and_report_checkpoint(self, report_dict: dict[str, Any], model: Any) -> None:
        with self._get_checkpoint(model) as checkpoint:
            report(report_dict, checkpoint=checkpoint)

    def _report_metrics(self, report_dict: dict[str, Any]) -> None:
        report(report_dict)


PREPROCESSOR_FILE = "preprocessor.pkl"


def save_preprocessor(directory: str, preprocessor: Any) -> None:
    """Keep a fitted preprocessor beside the model (``from_model(preprocessor=...)``)."""
    import cloudpickle

    Path(directory, PREPROCESSOR_FILE).write_bytes(cloudpickle.dumps(preprocessor))


def load_preprocessor(checkpoint: Checkpoint) -> Any:
    """The preprocessor saved with the model, or None (checkpoints come from this run's
    own storage, written by the user's own workers)."""
    import pickle

    with checkpoint.as_directory() as directory:
        path = Path(directory, PREPROCESSOR_FILE)
        return pickle.loads(path.read_bytes()) if path.exists() else None


def limit_threads(spec: WorkerSpec, library: str) -> Any:
    """One OpenMP thread per reserved CPU on this loop's thread, as Ray's OMP_NUM_THREADS.

    Both libraries default to a thread per core of the machine. Two ranks doing so on
    the same cores spin-wait against each other between allreduce rounds: xgboost's
    rabit took 0.85 s a round for 1,000 rows on a loaded 2-core machine, 0.02 s with a
    thread each. The library is usually loaded already (unpickling the loop imports
    it), so the environment variable alone would come too late; threadpoolctl sets the
    live OpenMP runtime's limit for this thread, the one the loop runs on. Returns the
    limiter, which must stay referenced while the loop runs. A user's own
    ``nthread``/``num_threads`` parameter still wins.
    """
    threads = max(1, int(spec.trial_resources.get("CPU", 1)))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if os.environ["OMP_NUM_THREADS"] != str(threads):
        return None  # the user chose a thread count for this process: keep it
    try:
        importlib.import_module(library)  # load its OpenMP runtime so the limit reaches it
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(limits=threads, user_api="openmp")
