"""The Tune dashboard feed with an injected put and clock (no cluster): what the document
holds, how it is bounded, and when it is written."""

import json
import math

from raylite.tune.execution import dashboard_feed as F
from raylite.tune.execution.dashboard_feed import ExperimentFeed
from raylite.tune.experiment.trial import Trial


class Recorder:
    def __init__(self):
        self.writes = []

    def __call__(self, key, value):
        self.writes.append((key, json.loads(value)))

    @property
    def doc(self):
        return self.writes[-1][1]


def _feed(metric="score", mode="max", **kw):
    put, now = Recorder(), [0.0]
    feed = ExperimentFeed("exp", metric=metric, mode=mode, scheduler="ASHAScheduler",
                          searcher="BasicVariantGenerator", storage_path="/tmp/results/exp",
                          put=put, clock=lambda: now[0], wall_clock=lambda: 1000.0 + now[0], **kw)
    return feed, put, now


def _trial(i, config=None):
    trial = Trial("f", f"t_{i:05d}", config if config is not None else {"lr": 0.1 * i})
    trial.status = Trial.RUNNING
    return trial


def _report(feed, trial, **metrics):
    trial.iteration += 1
    result = dict(metrics, training_iteration=trial.iteration, trial_id=trial.trial_id,
                  config=trial.config, hostname="h", done=False)
    trial.update_last_result(result)
    feed.result(trial, result)


def test_a_document_names_the_experiment_and_each_trial_with_its_best_and_history():
    feed, put, now = _feed()
    a, b = _trial(0, {"lr": 0.01, "model": {"layers": 2}}), _trial(1, {"lr": 0.5, "model": {"layers": 4}})
    feed.publish([a, b], force=True)
    assert put.writes[0][0] == "experiment:exp" and put.doc["status"] == "RUNNING"
    for score in (1.0, 3.0, 2.0):
        _report(feed, a, score=score, note="ok")
    _report(feed, b, score=0.5, loss=float("nan"), flag=True)
    b.status, b.error_msg = Trial.ERROR, "Traceback (most recent call last):\n  File x\nValueError: bad lr 0.5\n"
    now[0] = 2.0
    feed.publish([a, b])
    doc = put.doc
    assert {k: doc[k] for k in ("name", "metric", "mode", "scheduler", "searcher", "storage_path",
                                "num_trials", "trials_left_out", "started_at", "updated_at")} == {
        "name": "exp", "metric": "score", "mode": "max", "scheduler": "ASHAScheduler",
        "searcher": "BasicVariantGenerator", "storage_path": "/tmp/results/exp", "num_trials": 2,
        "trials_left_out": 0, "started_at": 1000.0, "updated_at": 1002.0}
    assert doc["trial_counts"] == {"RUNNING": 1, "ERROR": 1}
    assert doc["best"] == {"trial_id": "t_00000", "value": 3.0}
    first, second = doc["trials"]
    assert first["config"] == {"lr": 0.01, "model/layers": 2}
    assert first["metrics"] == {"score": 2.0, "note": "ok"}  # Tune's own keys are left out
    assert (first["iterations"], first["best"], first["error"]) == (3, 3.0, None)
    assert first["history"] == [[1, 1.0], [2, 3.0], [3, 2.0]]
    assert second["metrics"] == {"score": 0.5}  # NaN and bools are no metric values
    assert second["status"] == "ERROR" and second["error"] == "ValueError: bad lr 0.5"
    feed.finished([a, b], "FINISHED")
    assert put.doc["status"] == "FINISHED" and len(put.writes) == 3


def test_writes_wait_for_the_interval_and_for_a_change():
    feed, put, now = _feed()
    trial = _trial(0)
    feed.publish([trial], force=True)
    _report(feed, trial, score=1.0)
    feed.publish([trial])  # within the interval: no write
    assert len(put.writes) == 1
    now[0] = 1.5
    feed.publish([trial])
    assert len(put.writes) == 2
    now[0] = 10.0
    feed.publish([trial])  # nothing changed since: no write
    assert len(put.writes) == 2
    feed.changed()
    feed.publish([trial])
    assert len(put.writes) == 3


def test_a_large_experiment_keeps_the_best_the_running_and_the_newest_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(F, "MAX_TRIALS", 20)
    monkeypatch.setattr(F, "MAX_BEST", 5)
    feed, put, _ = _feed()
    trials = [_trial(i) for i in range(100)]
    for i, t in enumerate(trials):
        _report(feed, t, score=float(i % 50))  # the best five: 45..49 and 95..99
        t.status = Trial.TERMINATED
    trials[3].status = Trial.RUNNING
    feed.publish(trials, force=True)
    ids = [t["trial_id"] for t in put.doc["trials"]]
    assert len(ids) == 20 and put.doc["trials_left_out"] == 80 and put.doc["num_trials"] == 100
    assert ids == sorted(ids)  # in the experiment's order
    assert "t_00003" in ids  # unfinished
    assert {"t_00099", "t_00098", "t_00049"} <= set(ids)  # best and newest
    assert put.doc["best"]["value"] == 49.0


def test_a_long_history_is_thinned_evenly_and_ends_with_the_latest_point():
    feed, put, _ = _feed()
    trial = _trial(0)
    for i in range(1, 1001):
        _report(feed, trial, score=float(i))
    feed.publish([trial], force=True)
    history = put.doc["trials"][0]["history"]
    assert len(history) <= F.MAX_POINTS
    assert history[0] == [1, 1.0] and history[-1] == [1000, 1000.0]
    steps = {b[0] - a[0] for a, b in zip(history[:-2], history[1:-1])}
    assert len(steps) == 1  # evenly spaced, the whole trial spanned


def test_config_values_are_plain_json_and_strings_stay_text():
    feed, put, _ = _feed()
    trial = _trial(0, {"name": "<script>alert(1)</script>", "fn": len, "inf": math.inf,
                       "layers": (1, 2), "long": "x" * 1000, "none": None})
    feed.publish([trial], force=True)
    config = put.doc["trials"][0]["config"]
    assert config["name"] == "<script>alert(1)</script>"
    assert config["fn"] == "<built-in function len>" and config["inf"] == "inf"
    assert config["layers"] == [1, 2] and len(config["long"]) == F.MAX_TEXT and config["none"] is None


def test_without_a_metric_the_chart_follows_the_first_reported_number_and_no_best_is_named():
    feed, put, _ = _feed(metric=None, mode=None)
    trial = _trial(0)
    _report(feed, trial, phase="warmup", loss=0.9)
    _report(feed, trial, phase="train", loss=0.4)
    feed.publish([trial], force=True)
    doc = put.doc
    assert doc["chart_metric"] == "loss" and doc["best"] is None
    assert doc["trials"][0]["history"] == [[1, 0.9], [2, 0.4]] and doc["trials"][0]["best"] is None


def test_a_failing_put_never_reaches_the_experiment():
    def broken(key, value):
        raise ConnectionError("head gone")

    feed = ExperimentFeed("exp", put=broken)
    feed.publish([_trial(0)], force=True)
    feed.finished([_trial(0)], "ERROR", "RuntimeError: boom\nmore")
    assert feed.doc["error"] == "RuntimeError: boom"


def test_without_a_cluster_the_default_put_writes_nothing():
    import raylite

    if raylite.is_initialized():
        raylite.shutdown()
    F._default_put("experiment:x", b"{}")  # no cluster: returns quietly


def test_feed_for_names_the_scheduler_and_searcher_and_replays_a_restored_trials_history():
    from raylite.tune.execution.controller import ControllerSettings, TuneController
    from raylite.tune.execution.dashboard_feed import _searcher_name, feed_for
    from raylite.tune.schedulers import ASHAScheduler
    from raylite.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher
    from raylite.tune.search.search_generator import SearchGenerator
    from raylite.tune.stopper import NoopStopper

    class MySearch(Searcher):
        def suggest(self, trial_id):
            return {"x": 1}

    assert _searcher_name(SearchGenerator(ConcurrencyLimiter(MySearch(), 2))) == "ConcurrencyLimiter(MySearch)"
    scheduler = ASHAScheduler(metric="score", mode="min")
    restored = _trial(0)
    for score in (3.0, 2.0):
        restored.iteration += 1
        restored.update_last_result({"score": score, "training_iteration": restored.iteration})
    controller = TuneController(ControllerSettings(trainable_name="f", experiment_path="/x/exp"),
                                BasicVariantGenerator(), scheduler, NoopStopper(), [restored])
    feed = feed_for("exp", controller, "/x/exp")
    assert (feed.doc["metric"], feed.doc["mode"]) == ("score", "min")  # as the scheduler took them
    assert (feed.doc["scheduler"], feed.doc["searcher"]) == ("AsyncHyperBandScheduler", "BasicVariantGenerator")  # ASHA is its alias, as in Ray
    put = Recorder()
    feed._put = put
    feed.finished(controller.get_trials(), "FINISHED")
    assert put.doc["trials"][0]["history"] == [[1, 3.0], [2, 2.0]] and put.doc["best"]["value"] == 2.0


def test_in_the_background_publish_does_not_wait_for_the_head_and_the_last_write_wins():
    import threading

    entered, release, writes = threading.Event(), threading.Event(), []

    def slow_put(key, value):
        entered.set()
        release.wait(10)  # the head answers late
        writes.append(json.loads(value)["status"])

    now = [0.0]
    feed = ExperimentFeed("exp", put=slow_put, clock=lambda: now[0], background=True)
    trial = _trial(0)
    feed.publish([trial], force=True)  # returns while the write waits for the head
    assert entered.wait(10)  # the background thread took it (under load it may start late)
    now[0] = 5.0
    feed.changed()
    feed.publish([trial])
    assert writes == []
    threading.Timer(0.2, release.set).start()
    feed.finished([trial], "FINISHED")  # waits for the write under way, then writes the end
    assert writes[-1] == "FINISHED" and len(writes) == 2  # the waiting middle write was dropped
    assert not any(t.name == "raylite-tune-feed" and t.is_alive() for t in threading.enumerate())
