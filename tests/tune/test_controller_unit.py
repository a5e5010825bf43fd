"""The trial controller driven with plain calls (no cluster, no actors): scheduler decisions
become effects, and each trial's lifecycle follows from the events alone."""

from raylite import tune
from raylite.tune.execution.controller import (
    ContinueTrial,
    ControllerSettings,
    StartTrial,
    StopTrial,
    TimePassed,
    TrialFailed,
    TrialFinished,
    TrialReported,
    TuneController,
)
from raylite.tune.schedulers import ASHAScheduler, HyperBandScheduler, MedianStoppingRule
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler
from raylite.tune.search import BasicVariantGenerator
from raylite.tune.stopper import MaximumIterationStopper, NoopStopper


def _controller(space, num_samples=1, scheduler=None, cpus=2.0, stopper=None, **settings):
    alg = BasicVariantGenerator()
    alg.add_configurations({"config": space, "num_samples": num_samples})
    scheduler = scheduler or FIFOScheduler()
    scheduler.set_search_properties("score", "max")
    s = ControllerSettings(trainable_name="f", experiment_path="/nowhere", metric="score",
                           mode="max", cluster_resources={"CPU": cpus}, **settings)
    return TuneController(s, alg, scheduler, stopper or NoopStopper())


def _run_to_end(c, score_of, max_iter=10):
    """Play the runner: every started trial reports score_of(config, iteration) in turn."""
    started = {}
    effects = c.fill()
    steps = 0
    while not c.is_finished() and steps < 10_000:
        steps += 1
        for e in effects:
            if isinstance(e, StartTrial):
                started[e.trial.trial_id] = 0
            elif isinstance(e, StopTrial):
                started.pop(e.trial.trial_id, None)
        effects = []
        for trial_id in list(started):
            trial = c.get_trial(trial_id)
            if trial.status != "RUNNING":
                started.pop(trial_id)
                continue
            started[trial_id] += 1
            i = started[trial_id]
            if i > max_iter:
                effects += c.handle(TrialFinished(trial_id))
            else:
                effects += c.handle(TrialReported(trial_id, {"score": score_of(trial.config, i)},
                                                  time_this_iter_s=1.0, timestamp=0.0))
        effects += c.fill()
    return c.get_trials()


def test_resources_limit_how_many_trials_start():
    c = _controller({"x": tune.grid_search([1, 2, 3, 4])}, cpus=2.0)
    starts = [e for e in c.fill() if isinstance(e, StartTrial)]
    assert len(starts) == 2
    assert [t.status for t in c.get_trials()] == ["RUNNING", "RUNNING", "PENDING"]


def test_a_result_continues_and_a_stopper_ends_the_trial():
    c = _controller({"x": 1}, stopper=MaximumIterationStopper(2))
    (start,) = [e for e in c.fill() if isinstance(e, StartTrial)]
    tid = start.trial.trial_id
    first = c.handle(TrialReported(tid, {"score": 1}, time_this_iter_s=0.5, timestamp=1.0))
    assert any(isinstance(e, ContinueTrial) for e in first)
    second = c.handle(TrialReported(tid, {"score": 2}, time_this_iter_s=0.5, timestamp=2.0))
    assert any(isinstance(e, StopTrial) for e in second)
    trial = c.get_trial(tid)
    assert trial.status == "TERMINATED" and trial.last_result["training_iteration"] == 2
    assert trial.last_result["time_total_s"] == 1.0 and c.is_finished()


def test_failures_retry_until_max_failures_then_error():
    c = _controller({"x": 1}, max_failures=1)
    (start,) = [e for e in c.fill() if isinstance(e, StartTrial)]
    tid = start.trial.trial_id
    c.handle(TrialFailed(tid, "boom"))
    assert c.get_trial(tid).status == "PENDING"
    assert [e for e in c.fill() if isinstance(e, StartTrial)]
    c.handle(TrialFailed(tid, "boom again"))
    assert c.get_trial(tid).status == "ERROR" and c.is_finished()


def test_time_budget_stops_running_trials():
    c = _controller({"x": tune.grid_search([1, 2, 3])}, time_budget_s=5.0, start_s=100.0)
    c.fill()
    assert c.handle(TimePassed(104.0)) == []
    effects = c.handle(TimePassed(105.5))
    assert len([e for e in effects if isinstance(e, StopTrial)]) == 2
    assert all(t.status == "TERMINATED" for t in c.get_trials()) and c.is_finished()


def test_asha_stops_bad_trials_at_the_rungs():
    asha = ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3)
    # run one at a time, best first: every later trial meets rungs set by better ones
    c = _controller({"q": tune.grid_search(list(range(8, -1, -1)))}, scheduler=asha, cpus=1.0)
    trials = _run_to_end(c, lambda config, i: config["q"] * 10 + i, max_iter=9)
    iters = {t.config["q"]: t.last_result["training_iteration"] for t in trials}
    assert iters[8] == 9  # the best runs to max_t
    assert iters[0] == 1 and sum(v < 9 for v in iters.values()) >= 6  # stopped early


def test_hyperband_pauses_at_milestones_and_keeps_the_best():
    hb = HyperBandScheduler(max_t=9, reduction_factor=3)
    c = _controller({"q": tune.grid_search(list(range(9)))}, scheduler=hb, cpus=2.0)
    trials = _run_to_end(c, lambda config, i: config["q"], max_iter=9)
    iters = {t.config["q"]: t.last_result["training_iteration"] for t in trials}
    assert iters[8] == 9 and max(v for q, v in iters.items() if q < 6) <= 1
    assert all(t.status == "TERMINATED" for t in trials)


def test_median_stopping_rule_stops_below_median():
    rule = MedianStoppingRule(time_attr="training_iteration", grace_period=2,
                              min_samples_required=2)
    c = _controller({"q": tune.grid_search([5, 6, 7, 0])}, scheduler=rule, cpus=4.0)
    trials = _run_to_end(c, lambda config, i: config["q"], max_iter=5)
    loser = next(t for t in trials if t.config["q"] == 0)
    assert loser.last_result["training_iteration"] < 5
