"""The actor that runs one trial. The driver calls next_result() for each result, so the
trial advances one report at a time and a scheduler's decision lands before the next one.

next_result() returns one of:
  ("result", metrics, checkpoint_path | None, time_this_iter_s, timestamp)
  ("done",)                 the trainable returned
  ("error", traceback_text) the trainable raised
Errors come back as text, so a user exception that does not unpickle on the driver still
reaches the user's screen.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import traceback
from typing import Any

from raylite.train import Checkpoint
from raylite.tune import _storage
from raylite.tune.trainable import session as tune_session
from raylite.tune.trainable.trainable import Trainable


def _is_trainer(trainable: Any) -> bool:
    return hasattr(trainable, "train_loop_per_worker") and hasattr(trainable, "fit")


class TrialRunnerActor:
    """One trial's process-side half (made a raylite actor by the runner)."""

    def __init__(self, trainable: Any, config: dict, info: dict,
                 checkpoint_path: str | None) -> None:
        self._setup(trainable, config, info, checkpoint_path)

    def reset_and_next(self, trainable: Any, config: dict, info: dict,
                       checkpoint_path: str | None) -> tuple:
        """Run another trial in this actor (actor reuse: no new process per trial) and
        return its first result; one call, so no other call can slip in between."""
        if self._session is not None:
            self._session.stop()
        self._setup(trainable, config, info, checkpoint_path)
        return self.next_result()

    def _setup(self, trainable: Any, config: dict, info: dict,
               checkpoint_path: str | None) -> None:
        os.environ["TUNE_TRIAL_ID"] = info["trial_id"]
        _storage.makedirs(info["trial_dir"])
        if _storage.is_uri(info["trial_dir"]) is False:
            os.chdir(_storage.local_path(info["trial_dir"]))  # Ray runs trials in their dir
        self._trainable = trainable
        self._config = config
        self._info = info
        checkpoint = Checkpoint(checkpoint_path) if checkpoint_path else None
        self._checkpoint = checkpoint
        self._class_instance: Trainable | None = None
        self._session: tune_session.TrialSession | None = None
        self._started = False
        if inspect.isclass(trainable) and issubclass(trainable, Trainable):
            self._class_instance = trainable(config, trial_info=info)
            if checkpoint is not None:
                self._class_instance.restore(checkpoint)
        else:
            self._session = tune_session.TrialSession(info, checkpoint)
            tune_session._set_session(self._session)

    def ready(self) -> bool:
        return True

    # -- function trainables and Train trainers -------------------------------------------------
    def _run_function(self) -> None:
        session = self._session
        assert session is not None
        try:
            if _is_trainer(self._trainable):
                output = _run_trainer(self._trainable, self._config, self._info,
                                      session)
            else:
                output = self._trainable(self._config)
            if isinstance(output, dict):
                session.report(output)
            elif isinstance(output, (int, float)) and not isinstance(output, bool):
                session.report({"_metric": output})
            session.finish(("done",))
        except tune_session._Stopped:
            pass
        except BaseException:  # noqa: BLE001 - the driver decides what a failure means
            session.finish(("error", traceback.format_exc()))

    def next_result(self) -> tuple:
        if self._class_instance is not None:
            return self._next_class_result()
        assert self._session is not None
        first = not self._started
        if first:
            self._started = True
            threading.Thread(target=self._run_function, name="tune-trial", daemon=True).start()
        return self._session.next_item(first)

    # -- class trainables --------------------------------------------------------------------------
    def _next_class_result(self) -> tuple:
        trainable = self._class_instance
        assert trainable is not None
        start = time.time()
        try:
            result = trainable.train()
        except BaseException:  # noqa: BLE001
            return ("error", traceback.format_exc())
        path = None
        every = self._info.get("checkpoint_frequency", 0)
        wants = result.pop("should_checkpoint", False) or (
            every and trainable.iteration % every == 0)
        at_end = self._info.get("checkpoint_at_end") and result.get("done")
        if wants or at_end:
            path = self.save()
        return ("result", result, path, time.time() - start, time.time())

    def save(self) -> str | None:
        """Save a class trainable's state into the trial directory (pause, checkpoint_at_end)."""
        trainable = self._class_instance
        if trainable is None:
            return None
        index = self._info.get("checkpoint_index", 0)
        self._info["checkpoint_index"] = index + 1
        dest = _storage.join(self._info["trial_dir"], f"checkpoint_{index:06d}")
        if _storage.is_uri(dest):
            checkpoint = trainable.save()
            with checkpoint.as_directory() as local_dir:
                _storage.copy_dir_in(local_dir, dest)
        else:
            trainable.save(_storage.local_path(dest))
        return dest

    def stop(self) -> None:
        if self._class_instance is not None:
            try:
                self._class_instance.stop()
            except Exception:  # noqa: BLE001 - cleanup failing must not fail the trial
                traceback.print_exc()
        elif self._session is not None:
            self._session.stop()


def _run_trainer(trainer: Any, config: dict, info: dict,
                 session: tune_session.TrialSession) -> Any:
    """Run a Train trainer as the trial: its train_loop_config is the trial's, its reports
    (rank 0's metrics and the checkpoint) become the trial's results."""
    import copy

    from raylite.train import RunConfig, UserCallback

    class _Forward(UserCallback):
        def after_report(self, run_context: Any, metrics: list, checkpoint: Any) -> None:
            session.report(dict(metrics[0]) if metrics else {}, checkpoint=checkpoint)

    trial = copy.copy(trainer)
    loop_config = dict(trainer.train_loop_config or {})
    loop_config.update(config.get("train_loop_config", {}))
    trial.train_loop_config = loop_config
    for key in ("scaling_config", "datasets"):
        if key in config:
            setattr(trial, key, config[key])
    base = trainer.run_config
    trial.run_config = RunConfig(
        name="train", storage_path=info["trial_dir"], failure_config=base.failure_config,
        checkpoint_config=base.checkpoint_config, verbose=0,
        callbacks=[*(base.callbacks or []), _Forward()])
    resume = session.get_checkpoint()
    if resume is not None:
        trial.resume_from_checkpoint = resume
    trial.fit()
    return None
