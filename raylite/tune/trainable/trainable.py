"""`tune.Trainable`: the class form of a trainable. Tune calls setup(config) once, then
step() for each result; save_checkpoint(dir) / load_checkpoint(dir) carry its state across
pauses, retries and PBT's exploits."""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from typing import Any

from raylite.train import Checkpoint

_DICT_FILE = "_trainable_state.pkl"


class Trainable:
    """Subclass and override setup, step, save_checkpoint, load_checkpoint (and cleanup)."""

    def __init__(self, config: dict | None = None, logger_creator: Any = None,
                 storage: Any = None, **kwargs: Any) -> None:
        self.config = dict(config or {})
        self._iteration = 0
        self._time_total = 0.0
        self._trial_info = kwargs.get("trial_info") or {}
        self.setup(dict(self.config))

    # -- to override ------------------------------------------------------------------------
    def setup(self, config: dict) -> None:
        """Called once with the trial's config (allocate the model, data, ...)."""

    def step(self) -> dict:
        """One iteration; return its metrics (with "done": True to end the trial)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step().")

    def save_checkpoint(self, checkpoint_dir: str) -> dict | None:
        """Write the state into checkpoint_dir (or return a dict to be pickled there)."""
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Read what save_checkpoint wrote: the directory path, or the dict it returned."""

    def cleanup(self) -> None:
        """Called when the trial stops."""

    def reset_config(self, new_config: dict) -> bool:
        return False

    @classmethod
    def default_resource_request(cls, config: dict) -> Any:
        return None

    # -- what Tune calls ---------------------------------------------------------------------
    def train(self) -> dict:
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict of metrics, got "
                            f"{type(result).__name__}.")
        self._iteration += 1
        self._time_total += time.time() - start
        return dict(result)

    def save(self, checkpoint_dir: str | None = None) -> Checkpoint:
        checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="tune-trainable-")
        os.makedirs(checkpoint_dir, exist_ok=True)
        state = self.save_checkpoint(checkpoint_dir)
        if isinstance(state, dict):
            with open(os.path.join(checkpoint_dir, _DICT_FILE), "wb") as f:
                pickle.dump(state, f)
        elif state is not None and not isinstance(state, str):
            raise TypeError(f"{type(self).__name__}.save_checkpoint() must return None or a "
                            f"dict, got {type(state).__name__}.")
        with open(os.path.join(checkpoint_dir, ".tune_iteration"), "w") as f:
            f.write(str(self._iteration))
        return Checkpoint.from_directory(checkpoint_dir)

    def restore(self, checkpoint: Checkpoint | str) -> None:
        if isinstance(checkpoint, str):
            checkpoint = Checkpoint.from_directory(checkpoint)
        with checkpoint.as_directory() as local_dir:
            marker = os.path.join(local_dir, ".tune_iteration")
            if os.path.exists(marker):
                with open(marker) as f:
                    self._iteration = int(f.read() or 0)
            state_file = os.path.join(local_dir, _DICT_FILE)
            if os.path.exists(state_file):
                with open(state_file, "rb") as f:
                    self.load_checkpoint(pickle.load(f))
            else:
                self.load_checkpoint(local_dir)

    def stop(self) -> None:
        self.cleanup()

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        return self._trial_info.get("trial_id", "default")

    @property
    def trial_name(self) -> str:
        return self._trial_info.get("trial_name", "default")

    @property
    def logdir(self) -> str:
        return self._trial_info.get("trial_dir", "")

    @property
    def trial_resources(self) -> Any:
        return self._trial_info.get("resources")
