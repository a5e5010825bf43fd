"""Result: what ``fit()`` returns — last metrics, checkpoints, history, where it all is.

``build_result`` makes one from a run's state (the controller, at the end of a run);
``Result.from_path`` rebuilds one from the state file a run left on storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from raylite.train._internal.checkpoints import CheckpointManager, TrackedCheckpoint
from raylite.train._internal.filesystems import to_pyarrow
from raylite.train._internal.state import RunState
from raylite.train._internal.storage import STATE_FILE, StorageContext, split_run_path
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import CheckpointConfig

if TYPE_CHECKING:
    import pandas


class Result:
    """The outcome of a training run.

    ``metrics`` are the last reported metrics (metric-only reports count, unlike Ray
    2.60); ``metrics_dataframe`` has one row per report; ``checkpoint`` is the latest
    kept checkpoint and ``best_checkpoints`` every kept one with its metrics, best
    first (by ``checkpoint_score_attribute``, else most recent first).
    """

    def __init__(
        self,
        metrics: dict[str, Any] | None,
        checkpoint: Checkpoint | None,
        error: BaseException | None = None,
        path: str = "",
        metrics_history: list[dict[str, Any]] | None = None,
        best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] | None = None,
        filesystem: Any = None,
    ) -> None:
        self.metrics = metrics
        self.checkpoint = checkpoint
        self.error = error
        self.path = path
        self.filesystem = filesystem
        self.best_checkpoints = list(best_checkpoints or [])
        self._history = list(metrics_history or [])

    @property
    def metrics_dataframe(self) -> pandas.DataFrame | None:
        """One row per reported metrics dict (None when nothing was reported)."""
        import pandas

        if not self._history:
            return None
        return pandas.DataFrame(self._history)

    @property
    def config(self) -> dict[str, Any] | None:
        return (self.metrics or {}).get("config")

    def get_best_checkpoint(self, metric: str, mode: str = "max") -> Checkpoint | None:
        """The kept checkpoint with the best ``metric`` value ('max' or 'min')."""
        if mode not in ("max", "min"):
            raise ValueError(f"get_best_checkpoint(mode={mode!r}): use 'max' or 'min'.")
        scored = [(c, m[metric]) for c, m in self.best_checkpoints if metric in m]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cm: cm[1])[0]

    @classmethod
    def from_path(cls, path: str) -> Result:
        """Rebuild the Result of a finished (or failed) run from its directory."""
        storage_path, name = split_run_path(path)
        return result_from_storage(StorageContext.create(storage_path, name))

    def __repr__(self) -> str:
        return (
            f"Result(metrics={self.metrics}, path={self.path!r}, checkpoint={self.checkpoint}, "
            f"error={self.error!r})"
        )


def build_result(
    storage: StorageContext,
    state: RunState,
    manager: CheckpointManager,
    error: BaseException | None,
) -> Result:
    def ckpt(t: TrackedCheckpoint) -> Checkpoint:
        return Checkpoint(storage.checkpoint_fs_path(t.dir_name), storage.fs)

    latest = manager.latest
    return Result(
        metrics=dict(state.history[-1]) if state.history else None,
        checkpoint=ckpt(latest) if latest else None,
        error=error,
        path=storage.experiment_path,
        metrics_history=state.history,
        best_checkpoints=[(ckpt(t), dict(t.metrics)) for t in manager.best_first],
        filesystem=to_pyarrow(storage.fs),
    )


def result_from_storage(storage: StorageContext) -> Result:
    """Result of a run on storage (Result.from_path)."""
    state = RunState.from_json(storage.read_bytes(STATE_FILE))
    order: Literal["max", "min"] = "min" if state.score_order == "min" else "max"
    config = CheckpointConfig(
        checkpoint_score_attribute=state.score_attribute, checkpoint_score_order=order
    )
    manager = CheckpointManager(config, state.checkpoints)
    error = RuntimeError(state.error) if state.error else None
    return build_result(storage, state, manager, error)
