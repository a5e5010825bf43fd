"""RunConfig(callbacks=...): Ray Train UserCallback and Tune-style hooks, on the driver."""

import os
import tempfile

import pytest
from train_fakes import ThreadWorkerGroup

from raylite import train
from raylite.train import Checkpoint, CheckpointConfig, FailureConfig, UserCallback
from raylite.train._internal.callbacks import (
    CallbackDispatcher,
    TrainRunContext,
    TrialView,
    validate_callbacks,
)
from raylite.train._internal.controller import RunSpec, TrainController
from raylite.train._internal.storage import StorageContext


def run(fn, tmp_path, callbacks, n=2, failure=None, config=None):
    storage = StorageContext.create(str(tmp_path), "cb")
    storage.validate_writable()
    context = TrainRunContext(run_config="rc", train_loop_config=config)
    dispatcher = CallbackDispatcher(callbacks, context, TrialView("cb", config, storage.experiment_path))
    spec = RunSpec("TorchTrainer", fn, config, n, storage, CheckpointConfig(), failure or FailureConfig(),
                   verbose=0, poll_timeout_s=0.2, callbacks=dispatcher)
    ctrl = TrainController(spec, lambda: ThreadWorkerGroup(n))
    return ctrl, ctrl.run()


class Recorder(UserCallback):
    def __init__(self):
        self.reports, self.exceptions = [], []

    def after_report(self, run_context, metrics, checkpoint):
        assert run_context.get_run_config() == "rc"
        self.reports.append((metrics, checkpoint))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append(worker_exceptions)


class TuneStyle:  # no base class: Tune's Callback hooks by name
    def __init__(self):
        self.events = []

    def setup(self, **info):
        self.events.append("setup")

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.append(("start", str(trial)))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.events.append(("result", iteration, result["epoch"]))

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.events.append(("checkpoint", os.path.basename(checkpoint.path)))

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.events.append("recover")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.append(("complete", trial.status, trial.last_result["epoch"]))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.events.append(("error", trial.status))

    def on_experiment_end(self, trials, **info):
        self.events.append("end")


def loop(config):
    rank = train.get_context().get_world_rank()
    for epoch in range(3):
        if rank == 0 and epoch == 2:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "w.txt"), "w").close()
                train.report({"epoch": epoch, "rank": rank}, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report({"epoch": epoch, "rank": rank})


def test_user_callback_sees_every_report_with_each_ranks_metrics(tmp_path):
    rec = Recorder()
    _, result = run(loop, tmp_path, [rec])
    assert result.error is None and len(rec.reports) == 3
    for epoch, (metrics, ckpt) in enumerate(rec.reports):
        assert len(metrics) == 2 and metrics[0] == {"epoch": epoch, "rank": 0}
        assert metrics[1] in ({}, {"epoch": epoch, "rank": 1})  # rank 1 may not have reported yet
        assert (ckpt is not None) == (epoch == 2)
    assert rec.reports[2][1].path == result.checkpoint.path
    assert rec.exceptions == []


def test_tune_style_callback_hooks_in_order(tmp_path):
    cb = TuneStyle()
    run(loop, tmp_path, [cb])
    assert cb.events == [
        "setup", ("start", "cb"), ("result", 1, 0), ("result", 2, 1), ("result", 3, 2),
        ("checkpoint", "checkpoint_000002"), ("complete", "TERMINATED", 2), "end",
    ]


def test_callbacks_see_failures_restarts_and_errors(tmp_path):
    def failing(config):
        raise ValueError("boom")

    rec, tune = Recorder(), TuneStyle()
    _, result = run(failing, tmp_path, [rec, tune], n=1, failure=FailureConfig(max_failures=1))
    assert isinstance(result.error, train.TrainingFailedError)
    assert len(rec.exceptions) == 2 and isinstance(rec.exceptions[0][0], ValueError)
    assert tune.events == ["setup", ("start", "cb"), "recover", ("error", "ERROR"), "end"]


def test_a_raising_callback_ends_the_run_with_its_error(tmp_path):
    class Broken(UserCallback):
        def after_report(self, run_context, metrics, checkpoint):
            raise KeyError("no such metric")

    ctrl, result = run(loop, tmp_path, [Broken()])
    assert isinstance(ctrl.error, KeyError) and ctrl.state.status == "ERRORED"
    assert "Broken.after_report" in ctrl.state.error


def test_objects_without_hooks_are_rejected_up_front():
    assert validate_callbacks(None) == []
    with pytest.raises(TypeError, match="none of the callback hooks"):
        validate_callbacks([object()])
