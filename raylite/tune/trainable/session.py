"""The session inside a trial's actor: what `tune.report`, `tune.get_checkpoint` and
`tune.get_context` (and the older `train.report` / `session.report`) talk to.

report() persists the checkpoint into the trial's directory, hands the result to the actor's
next_result() call and then waits until the controller asks for the next one, so a
scheduler's decision (stop, pause) takes effect before the trial runs ahead.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from typing import Any

from raylite.train import Checkpoint
from raylite.tune import _storage


class TuneContext:
    """What a trial can ask about itself (Ray's `ray.tune.TuneContext`)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    def get_trial_id(self) -> str:
        return self._info["trial_id"]

    def get_trial_name(self) -> str:
        return self._info["trial_name"]

    def get_trial_dir(self) -> str:
        return self._info["trial_dir"]

    def get_experiment_name(self) -> str:
        return self._info["experiment_name"]

    def get_trial_resources(self) -> Any:
        return self._info.get("resources")

    def get_metadata(self) -> dict:
        return {}

    def get_world_size(self) -> int:
        return 1

    def get_world_rank(self) -> int:
        return 0

    def get_local_rank(self) -> int:
        return 0

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0

    def get_storage(self) -> Any:
        return None


class _Stopped(BaseException):
    """Unwinds a trial's function when its actor is told to stop (not an Exception, so a
    user's `except Exception` does not swallow it)."""


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        try:
            return item()
        except Exception:  # noqa: BLE001 - keep the value as it is
            return value
    return value


class TrialSession:
    """One trial's session in its actor process; see the module docstring."""

    def __init__(self, info: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        self.info = info
        self.context = TuneContext(info)
        self._checkpoint = checkpoint
        self._results: queue.Queue = queue.Queue()
        self._resume = threading.Semaphore(0)
        self._stopping = False
        self._checkpoint_index = info.get("checkpoint_index", 0)
        self._last_s = time.time()

    # -- called by the trial's code ------------------------------------------------------------
    def report(self, metrics: dict, checkpoint: Checkpoint | None = None,
               checkpoint_dir_name: str | None = None) -> None:
        if not isinstance(metrics, dict):
            raise TypeError(f"tune.report(metrics) needs a dict, got {type(metrics).__name__}.")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError("tune.report(checkpoint=...) needs a ray.tune.Checkpoint, got "
                            f"{type(checkpoint).__name__}; wrap a directory with "
                            "Checkpoint.from_directory(path).")
        if self._stopping:
            raise _Stopped()
        path = self._persist(checkpoint, checkpoint_dir_name) if checkpoint else None
        now = time.time()
        clean = {str(k): _plain(v) for k, v in metrics.items()}
        self._results.put(("result", clean, path, now - self._last_s, now))
        self._resume.acquire()
        if self._stopping:
            raise _Stopped()
        self._last_s = time.time()

    def get_checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    def get_dataset_shard(self, name: str = "train") -> Any:
        raise KeyError(f"get_dataset_shard({name!r}) works inside a Train trainer's loop, not "
                       "in a Tune function trainable.")

    def reported_checkpoints(self) -> list:
        return []

    def _persist(self, checkpoint: Checkpoint, dir_name: str | None) -> str:
        name = dir_name or f"checkpoint_{self._checkpoint_index:06d}"
        self._checkpoint_index += 1
        dest = _storage.join(self.info["trial_dir"], name)
        with checkpoint.as_directory() as local_dir:
            _storage.copy_dir_in(local_dir, dest)
        if getattr(checkpoint, "_owned_tempdir", False):
            shutil.rmtree(checkpoint.path, ignore_errors=True)
        return dest

    # -- called by the actor -----------------------------------------------------------------------
    def next_item(self, first: bool) -> tuple:
        if not first:
            self._resume.release()
        return self._results.get()

    def finish(self, item: tuple) -> None:
        self._results.put(item)

    def stop(self) -> None:
        self._stopping = True
        self._resume.release()


_current: TrialSession | None = None


def _set_session(session: TrialSession | None) -> None:
    """Install the session for tune.* and for train.report / session.report in this process."""
    global _current
    _current = session
    try:
        # Train's report()/get_checkpoint()/get_context() look up Train's session; inside a
        # Tune trial they must reach this one (Ray's train.report works inside Tune too).
        from raylite.train._internal import session as train_session

        train_session.set_session(session)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - Train always ships with raylite
        pass


def get_session() -> TrialSession | None:
    return _current


def _require(what: str) -> TrialSession:
    if _current is None:
        raise RuntimeError(f"{what} only works inside a Tune trial (a function passed to "
                           "tune.Tuner(...) and run by Tuner.fit()); it was called outside one.")
    return _current


def report(metrics: dict, *, checkpoint: Checkpoint | None = None,
           checkpoint_dir_name: str | None = None) -> None:
    """Report a trial's metrics (and optionally a checkpoint) to Tune."""
    _require("tune.report()").report(metrics, checkpoint, checkpoint_dir_name)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint this trial resumes from (a retry, PBT's exploit, a restore), or None."""
    return _current.get_checkpoint() if _current is not None else None


def get_context() -> TuneContext:
    """This trial's id, name, directory and resources."""
    if _current is None:
        return TuneContext({"trial_id": None, "trial_name": None, "trial_dir": None,
                            "experiment_name": None})
    return _current.context


__all__ = ["TuneContext", "get_checkpoint", "get_context", "report"]
