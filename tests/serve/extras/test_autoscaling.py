"""The autoscaling policy with a fake clock: pure calls, no cluster, no sleeping."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylite.serve._internal.autoscaling import AutoscalingPolicy, desired_replicas, resolve_config


def cfg(**kw):
    base = dict(min_replicas=1, max_replicas=10, target_ongoing_requests=2, upscale_delay_s=0,
                downscale_delay_s=0, look_back_period_s=30)
    base.update(kw)
    return base


@pytest.mark.parametrize("total,current,extra,expected", [
    (12, 3, {}, 6),                            # 4 per replica, target 2 -> twice as many
    (12, 3, {"upscaling_factor": 0.5}, 5),     # ratio 2 smoothed to 1.5 -> ceil(4.5)
    (2, 4, {}, 1),                             # ratio 0.25 -> 1
    (0, 4, {"downscaling_factor": 0.1}, 3),    # smoothing stuck at 4 -> one lower
    (100, 3, {}, 10),                          # capped at max_replicas
    (0, 3, {"min_replicas": 2}, 2),            # floored at min_replicas
    (1, 0, {"min_replicas": 0}, 1),            # scale from zero
    (0, 0, {"min_replicas": 0}, 0),            # nothing queued: stay at zero
    (1, 0, {"min_replicas": 0, "upscaling_factor": 3}, 3),
    (6, 3, {}, 3),                             # on target: no change
])
def test_desired_replicas_worked_examples(total, current, extra, expected):
    assert desired_replicas(total, current, cfg(**extra)) == expected


def test_older_alias_names_and_objects_are_read():
    config = SimpleNamespace(min_replicas=1, max_replicas=10, target_ongoing_requests=None,
                             target_num_ongoing_requests_per_replica=4, upscaling_factor=None,
                             upscale_smoothing_factor=0.5, smoothing_factor=None)
    k = resolve_config(config)
    assert (k.target_ongoing_requests, k.upscaling_factor, k.downscaling_factor) == (4, 0.5, 1.0)
    assert k.upscale_delay_s == 30.0 and k.downscale_delay_s == 600.0  # Ray's defaults
    assert desired_replicas(24, 3, config) == 5  # ratio 2 -> 1.5 -> ceil(4.5)


@pytest.mark.parametrize("bad,field", [
    ({"min_replicas": -1}, "min_replicas"),
    ({"min_replicas": 5, "max_replicas": 2}, "max_replicas"),
    ({"initial_replicas": 20}, "initial_replicas"),
    ({"target_ongoing_requests": 0}, "target_ongoing_requests"),
    ({"upscale_delay_s": -1}, "upscale_delay_s"),
])
def test_bad_config_names_the_field(bad, field):
    with pytest.raises(ValueError, match=f"autoscaling_config.{field}"):
        AutoscalingPolicy(cfg(**bad))


def test_initial_replicas():
    assert AutoscalingPolicy(cfg(min_replicas=2)).initial_replicas() == 2
    assert AutoscalingPolicy(cfg(min_replicas=0, initial_replicas=3)).initial_replicas() == 3


def test_upscale_waits_for_upscale_delay():
    p = AutoscalingPolicy(cfg(upscale_delay_s=30))
    now = 0.0
    for _ in range(3):  # 10 s apart: 3 replicas at 4 ongoing each
        for r in "abc":
            p.record_replica_metrics(r, 4, now)
        if now < 30:
            assert p.decide(3, now) == 3
        now += 10
    for r in "abc":
        p.record_replica_metrics(r, 4, 30)
    assert p.decide(3, 30) == 6


def test_a_break_in_the_wish_restarts_the_delay():
    p = AutoscalingPolicy(cfg(upscale_delay_s=20, look_back_period_s=5))
    p.record_replica_metrics("a", 8, 0)
    assert p.decide(1, 0) == 1
    p.record_replica_metrics("a", 2, 10)  # back on target: the wish ends
    assert p.decide(1, 10) == 1
    p.record_replica_metrics("a", 8, 15)
    assert p.decide(1, 15) == 1
    p.record_replica_metrics("a", 8, 25)
    assert p.decide(1, 25) == 1  # only 10 s of the new wish
    p.record_replica_metrics("a", 8, 35)
    assert p.decide(1, 35) == 4


def test_downscale_waits_for_downscale_delay_and_respects_min():
    p = AutoscalingPolicy(cfg(min_replicas=1, downscale_delay_s=600, look_back_period_s=30))
    t = 0.0
    while t < 600:
        for r in "abcd":
            p.record_replica_metrics(r, 0, t)
        assert p.decide(4, t) == 4
        t += 10
    for r in "abcd":
        p.record_replica_metrics(r, 0, t)
    assert p.decide(4, t) == 1


def test_average_over_the_look_back_window():
    p = AutoscalingPolicy(cfg(look_back_period_s=30))
    for t, v in [(0, 0), (10, 0), (20, 12)]:  # a spike: mean 4 over the window
        p.record_replica_metrics("a", v, t)
    assert p.total_ongoing(20) == pytest.approx(4)
    assert p.decide(1, 20) == 2
    assert p.total_ongoing(41) == pytest.approx(12)  # the zeros at 0 and 10 aged out


def test_stale_reporters_are_dropped_and_silence_holds_the_count():
    p = AutoscalingPolicy(cfg(look_back_period_s=30))
    p.record_replica_metrics("gone", 50, 0)
    p.record_replica_metrics("alive", 2, 25)
    assert p.total_ongoing(25) == pytest.approx(52)
    assert p.total_ongoing(31) == pytest.approx(2)  # "gone" has no sample in the window
    assert p.total_ongoing(100) is None
    assert p.decide(5, 100) == 5  # no metrics at all: hold, do not shrink


def test_zero_to_one_on_queued_handle_requests_immediately_and_back_to_zero():
    p = AutoscalingPolicy(cfg(min_replicas=0, max_replicas=3, upscale_delay_s=30, downscale_delay_s=60,
                              look_back_period_s=10))
    p.record_handle_metrics("h1", 0, 0)
    assert p.decide(0, 0) == 0
    p.record_handle_metrics("h1", 1, 1)
    assert p.decide(0, 1) == 1  # a request waits: no upscale delay from zero
    # the replica serves it, then idles; the handle's queue is empty
    for t in range(20, 81, 10):
        p.record_replica_metrics("r1", 0, t)
        p.record_handle_metrics("h1", 0, t)
        assert p.decide(1, t, running_replicas=1) == (0 if t >= 80 else 1)


def test_downscale_to_zero_delay_when_configured():
    p = AutoscalingPolicy(cfg(min_replicas=0, downscale_delay_s=10, downscale_to_zero_delay_s=100,
                              look_back_period_s=5))
    for t in range(0, 101, 5):
        p.record_replica_metrics("r", 0, t)
        got = p.decide(1, t)
        assert got == (0 if t >= 100 else 1)


def test_pending_replicas_are_waited_for():
    p = AutoscalingPolicy(cfg(min_replicas=0))
    p.record_handle_metrics("h", 3, 0)
    assert p.decide(1, 0, running_replicas=0) == 1  # the first replica is starting


def test_config_change_back_inside_bounds_is_immediate():
    p = AutoscalingPolicy(cfg(min_replicas=2, max_replicas=4, upscale_delay_s=999, downscale_delay_s=999))
    assert p.decide(1, 0) == 2
    assert p.decide(9, 0) == 4
