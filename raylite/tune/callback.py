"""`tune.Callback`: hooks called on the driver as the experiment runs. Override the ones you
need; each receives the iteration of the driver's loop, the list of all trials and the trial
concerned (and its result)."""

from __future__ import annotations

from typing import Any


class Callback:
    """Base class for Tune callbacks (RunConfig(callbacks=[...]))."""

    def setup(self, stop: Any = None, num_samples: int | None = None,
              total_num_samples: int | None = None, **info: Any) -> None:
        """Called once before the first trial starts."""

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        pass

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        pass

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_restore(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        pass

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any,
                      **info: Any) -> None:
        pass

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        pass

    def get_state(self) -> dict | None:
        return None

    def set_state(self, state: dict) -> None:
        pass


class CallbackList:
    """Calls one hook on every callback; the hooks a callback lacks are skipped."""

    def __init__(self, callbacks: list[Any]) -> None:
        for cb in callbacks:
            if not any(hasattr(cb, hook) for hook in _HOOKS):
                raise TypeError(f"{cb!r} is not a Tune callback: subclass ray.tune.Callback and "
                                "override on_trial_result, on_trial_complete, ...")
        self._callbacks = list(callbacks)

    def call(self, hook: str, **kwargs: Any) -> None:
        for cb in self._callbacks:
            method = getattr(cb, hook, None)
            if method is not None:
                method(**kwargs)


_HOOKS = [name for name in vars(Callback) if name.startswith(("on_", "setup"))]
