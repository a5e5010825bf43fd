"""The I/O shell around the TuneController: starts each trial's actor, waits for results,
turns them into events, carries out the controller's effects, saves the experiment and
prints progress. Every decision is the controller's; this module only does what it is told.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import raylite
from raylite.train import Checkpoint
from raylite.tune.callback import CallbackList
from raylite.tune.execution.controller import (
    ContinueTrial,
    DeleteCheckpoints,
    Notify,
    SaveExperiment,
    StartTrial,
    StopTrial,
    TimePassed,
    TrialFailed,
    TrialFinished,
    TrialReported,
    TuneController,
)
from raylite.tune.execution.dashboard_feed import ExperimentFeed
from raylite.tune.execution.experiment_state import ExperimentWriter
from raylite.tune.execution.trial_actor import TrialRunnerActor, _is_trainer
from raylite.tune.experiment.trial import Trial
from raylite.tune.progress_reporter import TuneReporter

_ActorClass: Any = None


def _actor_class() -> Any:
    global _ActorClass
    if _ActorClass is None:
        _ActorClass = raylite.remote(TrialRunnerActor)
    return _ActorClass


class _Running:
    """The driver's handle on one started trial."""

    def __init__(self, trial: Trial, actor: Any, pg: Any) -> None:
        self.trial = trial
        self.actor = actor
        self.pg = pg
        self.pending: Any = None  # the in-flight next_result() ref


class TrialRunner:
    """Runs a controller's experiment to the end."""

    def __init__(self, controller: TuneController, trainable: Any, writer: ExperimentWriter,
                 reporter: TuneReporter, callbacks: CallbackList, experiment_name: str,
                 checkpoint_config: Any = None, reuse_actors: bool = True,
                 feed: ExperimentFeed | None = None) -> None:
        self._controller = controller
        self._trainable = trainable
        self._writer = writer
        self._reporter = reporter
        self._callbacks = callbacks
        self._experiment_name = experiment_name
        self._checkpoint_config = checkpoint_config
        self._running: dict[str, _Running] = {}
        self._by_ref: dict[Any, _Running] = {}
        self._iteration = 0
        self._save_wanted = False
        self._trainable_ref: Any = None
        self._reuse = reuse_actors
        self._idle: dict[Any, list[Any]] = {}  # resources -> actors kept for the next trial
        self._feed = feed or ExperimentFeed(experiment_name, put=lambda key, value: None)

    def run(self) -> None:
        c = self._controller
        self._trainable_ref = raylite.put(self._trainable)
        c.settings.start_s = time.monotonic()
        self._feed.publish(c.get_trials(), force=True)
        status, error = "FINISHED", None
        try:
            while True:
                self._iteration += 1
                self._callbacks.call("on_step_begin", iteration=self._iteration,
                                     trials=c.get_trials())
                self._apply(c.fill())
                if c.is_finished():
                    break
                if not self._by_ref:
                    if not self._nothing_can_run():
                        continue
                    break
                self._wait_and_handle()
                self._apply(c.handle(TimePassed(time.monotonic())))
                self._callbacks.call("on_step_end", iteration=self._iteration,
                                     trials=c.get_trials())
                if self._save_wanted:
                    self._save(force=False)
                self._reporter.maybe_print(c.get_trials(), self._resources_text())
                self._feed.publish(c.get_trials())
        except KeyboardInterrupt:
            status = "INTERRUPTED"
            raise
        except BaseException as exc:
            status, error = "ERROR", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            for handle in list(self._running.values()):
                self._stop(handle, save=False, keep=False)
            self._drop_idle()
            self._save(force=True)
            if c.error is not None and status == "FINISHED":
                status, error = "ERROR", f"{type(c.error).__name__}: {c.error}"
            self._feed.finished(c.get_trials(), status, error)
        self._callbacks.call("on_experiment_end", trials=c.get_trials())

    def _nothing_can_run(self) -> bool:
        """No trial runs and fill() started none: finished, or waiting trials can never run."""
        waiting = [t for t in self._controller.get_trials()
                   if t.status in (Trial.PENDING, Trial.PAUSED)]
        if waiting:
            raise RuntimeError(
                f"{len(waiting)} trials wait but none can start ({waiting[:3]}...): the "
                f"scheduler {type(self._controller.scheduler).__name__} chose none to run.")
        return True

    def _wait_and_handle(self) -> None:
        refs = list(self._by_ref)
        ready, rest = raylite.wait(refs, num_returns=1, timeout=0.5)
        if ready and rest:
            more, _ = raylite.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            handle = self._by_ref.pop(ref)
            handle.pending = None
            self._apply(self._controller.handle(self._event_of(handle, ref)))

    def _event_of(self, handle: _Running, ref: Any) -> Any:
        trial_id = handle.trial.trial_id
        try:
            item = raylite.get(ref)
        except Exception as exc:  # noqa: BLE001 - the actor died or could not start
            return TrialFailed(trial_id, f"{type(exc).__name__}: {exc}")
        if item[0] == "result":
            _, metrics, path, dt, stamp = item
            return TrialReported(trial_id, metrics, path, dt, stamp)
        if item[0] == "done":
            return TrialFinished(trial_id)
        return TrialFailed(trial_id, item[1])

    # -- effects -----------------------------------------------------------------------------
    def _apply(self, effects: list) -> None:
        if effects:
            self._feed.changed()
        for effect in effects:
            if isinstance(effect, StartTrial):
                self._start(effect.trial, effect.checkpoint)
            elif isinstance(effect, ContinueTrial):
                self._next(self._running[effect.trial.trial_id])
            elif isinstance(effect, StopTrial):
                handle = self._running.get(effect.trial.trial_id)
                if handle is not None:
                    self._stop(handle, effect.save)
            elif isinstance(effect, Notify):
                self._notify(effect)
            elif isinstance(effect, SaveExperiment):
                self._save_wanted = True
            elif isinstance(effect, DeleteCheckpoints):
                self._delete_checkpoints(effect)

    def _delete_checkpoints(self, effect: DeleteCheckpoints) -> None:
        """Remove checkpoints past num_to_keep; one that cannot be removed is left, with a warning."""
        for checkpoint in effect.checkpoints:
            try:
                checkpoint.filesystem.rm(checkpoint.path, recursive=True)
            except FileNotFoundError:
                pass
            except Exception as exc:  # noqa: BLE001 - a leftover checkpoint never fails the experiment
                warnings.warn(f"Tune could not delete trial {effect.trial}'s checkpoint {checkpoint.path} "
                              f"(past CheckpointConfig(num_to_keep=...)): {exc}", stacklevel=2)

    def _notify(self, effect: Notify) -> None:
        trials = self._controller.get_trials()
        kwargs: dict[str, Any] = {"iteration": self._iteration, "trials": trials,
                                  "trial": effect.trial}
        if effect.hook == "on_trial_result":
            self._feed.result(effect.trial, effect.result or {})
            self._reporter.result(effect.trial, effect.result or {})
            self._callbacks.call("on_trial_result", result=effect.result, **kwargs)
            if (effect.result or {}).get("checkpoint_dir_name"):
                self._callbacks.call("on_checkpoint", checkpoint=effect.trial.checkpoint,
                                     **kwargs)
        else:
            self._callbacks.call(effect.hook, **kwargs)

    def _start(self, trial: Trial, checkpoint: Checkpoint | None) -> None:
        pgf = trial.placement_group_factory
        head = pgf.bundles[0]
        options: dict[str, Any] = {"num_cpus": head.get("CPU", 0), "max_concurrency": 2}
        if head.get("GPU"):
            options["num_gpus"] = head["GPU"]
        if head.get("memory"):
            options["memory"] = head["memory"]
        custom = {k: v for k, v in head.items() if k not in ("CPU", "GPU", "memory")}
        if custom:
            options["resources"] = custom
        pg = None
        trainer = _is_trainer(self._trainable)
        if trainer:
            options = {"num_cpus": 0, "max_concurrency": 2}
        elif len(pgf.bundles) > 1:
            from raylite.util import placement_group
            from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg = placement_group(pgf.bundles, strategy=pgf.strategy)
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
        key = (repr(options), trainer, pg is not None)
        reusable = self._reuse and not trainer and pg is None
        info = {"trial_id": trial.trial_id, "trial_name": str(trial),
                "trial_dir": trial.path, "experiment_name": self._experiment_name,
                "resources": pgf, "checkpoint_index": trial.num_checkpoints}
        cc = self._checkpoint_config
        if cc is not None:
            info["checkpoint_frequency"] = getattr(cc, "checkpoint_frequency", 0)
            info["checkpoint_at_end"] = getattr(cc, "checkpoint_at_end", False)
        args = (self._trainable_ref, trial.config, info, checkpoint.path if checkpoint else None)
        idle = self._idle.get(key) if reusable else None
        first = None
        if idle:
            actor = idle.pop()
            first = actor.reset_and_next.remote(*args)
        else:
            self._drop_idle()  # idle actors of other shapes would hold resources this one needs
            actor = _actor_class().options(**options).remote(*args)
        handle = _Running(trial, actor, pg)
        handle.reuse_key = key if reusable else None
        self._running[trial.trial_id] = handle
        self._callbacks.call("on_trial_start", iteration=self._iteration,
                             trials=self._controller.get_trials(), trial=trial)
        if checkpoint is not None:
            self._callbacks.call("on_trial_restore", iteration=self._iteration,
                                 trials=self._controller.get_trials(), trial=trial)
        if first is None:
            self._next(handle)
        else:
            handle.pending = first
            self._by_ref[first] = handle

    def _next(self, handle: _Running) -> None:
        handle.pending = handle.actor.next_result.remote()
        self._by_ref[handle.pending] = handle

    def _drop_idle(self) -> None:
        for actors in self._idle.values():
            for actor in actors:
                try:
                    raylite.kill(actor)
                except Exception:  # noqa: BLE001
                    pass
        self._idle.clear()

    def _stop(self, handle: _Running, save: bool, keep: bool = True) -> None:
        trial = handle.trial
        self._running.pop(trial.trial_id, None)
        if handle.pending is not None:
            self._by_ref.pop(handle.pending, None)
        try:
            if save:
                path = raylite.get(handle.actor.save.remote(), timeout=60)
                if path:
                    trial.checkpoint = Checkpoint(path)
                    trial.num_checkpoints += 1
                    self._callbacks.call("on_trial_save", iteration=self._iteration,
                                         trials=self._controller.get_trials(), trial=trial)
            raylite.get(handle.actor.stop.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a dead actor needs no stopping
            keep = False
        key = getattr(handle, "reuse_key", None)
        if keep and key is not None and trial.status != Trial.ERROR:
            self._idle.setdefault(key, []).append(handle.actor)
            return
        try:
            raylite.kill(handle.actor)
        except Exception:  # noqa: BLE001
            pass
        if handle.pg is not None:
            from raylite.util import remove_placement_group

            try:
                remove_placement_group(handle.pg)
            except Exception:  # noqa: BLE001
                pass

    def _save(self, force: bool) -> None:
        c = self._controller
        self._save_wanted = False
        state = {"search_alg": c.search_alg, "scheduler": c.scheduler, "stopper": c.stopper,
                 "next_index": len(c.get_trials()), "id_prefix": c.settings.id_prefix}
        try:
            wrote = self._writer.flush(c.get_trials(), state, force=force)
        except Exception:  # noqa: BLE001 - e.g. an unpicklable searcher: keep the files we can
            state = {"next_index": len(c.get_trials()), "id_prefix": c.settings.id_prefix}
            wrote = self._writer.flush(c.get_trials(), state, force=True)
        self._save_wanted = not wrote

    def _resources_text(self) -> str:
        total = self._controller.settings.cluster_resources
        used: dict[str, float] = {}
        for handle in self._running.values():
            for k, v in handle.trial.placement_group_factory.required_resources.items():
                used[k] = used.get(k, 0.0) + v
        return (f"{used.get('CPU', 0):g}/{total.get('CPU', 0):g} CPUs, "
                f"{used.get('GPU', 0):g}/{total.get('GPU', 0):g} GPUs")
