"""Pure parts of Train: checkpoint retention, report merging, failure policy, feasibility."""

import pytest

from raylite.train import CheckpointConfig, FailureConfig, ScalingConfig
from raylite.train._internal.checkpoints import CheckpointManager, TrackedCheckpoint
from raylite.train._internal.messages import WorkerReport
from raylite.train._internal.policies import (
    FailureAction,
    FailurePolicy,
    infeasible_message,
    max_workers_that_fit,
)
from raylite.train._internal.reports import LateCheckpoint, ReportAggregator, RunReport


def ck(i, **metrics):
    return TrackedCheckpoint(i, f"checkpoint_{i:06d}", metrics)


def test_keep_best_by_min_score():
    m = CheckpointManager(CheckpointConfig(2, "loss", "min"))
    assert m.register(ck(0, loss=0.9)) == []
    assert m.register(ck(1, loss=0.5)) == []
    assert [c.index for c in m.register(ck(2, loss=0.7))] == [0]
    assert [c.index for c in m.register(ck(3, loss=0.3))] == [2]
    assert [c.index for c in m.kept] == [1, 3]
    assert [c.index for c in m.best_first] == [3, 1]
    assert m.latest.index == 3


def test_keep_best_by_max_score_drops_new_bad_one():
    m = CheckpointManager(CheckpointConfig(1, "acc", "max"))
    m.register(ck(0, acc=0.8))
    assert [c.index for c in m.register(ck(1, acc=0.1))] == [1]
    assert [c.index for c in m.kept] == [0]


def test_keep_most_recent_without_score():
    m = CheckpointManager(CheckpointConfig(num_to_keep=2))
    for i in range(5):
        m.register(ck(i, loss=i))
    assert [c.index for c in m.kept] == [3, 4]
    assert [c.index for c in m.best_first] == [4, 3]


def test_keep_all_by_default_and_missing_score_ranks_last():
    m = CheckpointManager(CheckpointConfig())
    for i in range(4):
        m.register(ck(i))
    assert len(m.kept) == 4
    m = CheckpointManager(CheckpointConfig(1, "loss", "min"))
    m.register(ck(0, loss=1.0))
    with pytest.warns(UserWarning, match="ranks last"):
        assert [c.index for c in m.register(ck(1))] == [1]


def test_checkpoint_config_validation():
    with pytest.raises(ValueError, match="num_to_keep"):
        CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="max"):
        CheckpointConfig(checkpoint_score_order="best")
    with pytest.raises(ValueError, match="max_failures"):
        FailureConfig(max_failures=-2)


def rep(rank, index, ckpt=None, **metrics):
    return WorkerReport(rank, index, metrics, ckpt)


def test_reports_emit_on_rank0_with_rank0_metrics():
    agg = ReportAggregator(2)
    assert agg.add(rep(1, 0, "c0", loss=2.0)) == []  # held for rank 0
    out = agg.add(rep(0, 0, None, loss=1.0))
    assert out == [RunReport(0, 0, {"loss": 1.0}, "c0")]
    assert out[0].rank_metrics == {0: {"loss": 1.0}, 1: {"loss": 2.0}}  # what callbacks see


def test_rank0_only_reports_never_wait_for_others():
    agg = ReportAggregator(2)
    out = []
    for i in range(3):
        out += agg.add(rep(0, i, f"c{i}", epoch=i))
    assert [r.index for r in out] == [0, 1, 2]
    assert agg.finished(1) == []
    assert agg.finished(0) == []


def test_late_checkpoint_attaches_to_emitted_report():
    agg = ReportAggregator(2)
    agg.add(rep(0, 0, None, loss=1.0))
    assert agg.add(rep(1, 0, "c0", loss=9.0)) == [LateCheckpoint(0, "c0")]
    assert agg.add(rep(1, 0, "c0")) == []


def test_lowest_rank_speaks_after_rank0_finished():
    agg = ReportAggregator(3)
    agg.add(rep(0, 0, None, who=0))
    agg.finished(0)
    assert agg.add(rep(2, 1, None, who=2)) == []  # rank 1 still running, may report #1
    out = agg.add(rep(1, 1, None, who=1))
    assert out == [RunReport(1, 1, {"who": 1}, None)]


def test_flush_emits_held_reports():
    agg = ReportAggregator(2)
    agg.add(rep(1, 0, None, who=1))
    assert agg.flush() == [RunReport(0, 1, {"who": 1}, None)]


def test_failure_policy():
    p = FailurePolicy(FailureConfig(max_failures=2))
    assert [p.decide(i).action for i in (1, 2, 3)] == [
        FailureAction.RESTART,
        FailureAction.RESTART,
        FailureAction.RAISE,
    ]
    assert FailurePolicy(FailureConfig(0)).decide(1).action is FailureAction.RAISE
    assert FailurePolicy(FailureConfig(-1)).decide(1000).action is FailureAction.RESTART


def test_max_workers_that_fit():
    nodes = [{"CPU": 2}, {"CPU": 3}]
    assert max_workers_that_fit({"CPU": 1}, "PACK", nodes) == 5
    assert max_workers_that_fit({"CPU": 1}, "STRICT_PACK", nodes) == 3
    assert max_workers_that_fit({"CPU": 1}, "STRICT_SPREAD", nodes) == 2
    assert max_workers_that_fit({"CPU": 1, "GPU": 1}, "PACK", nodes) == 0


def test_infeasible_message_names_request_and_capacity():
    assert infeasible_message("TorchTrainer", 2, {"CPU": 1}, "PACK", [{"CPU": 2}]) is None
    msg = infeasible_message("TorchTrainer", 8, {"CPU": 1}, "PACK", [{"CPU": 2, "memory": 1e9}])
    assert "8 workers" in msg and "{CPU: 8}" in msg and "at most 2" in msg and "{CPU: 2}" in msg
    msg = infeasible_message("TorchTrainer", 1, {"CPU": 1, "GPU": 1}, "PACK", [{"CPU": 2}])
    assert "no GPUs" in msg and "use_gpu=False" in msg


def test_scaling_config_resources():
    s = ScalingConfig(num_workers=3)
    assert s._resources_per_worker_not_none == {"CPU": 1.0}
    assert s.total_resources == {"CPU": 3.0}
    s = ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"CPU": 4})
    assert s._resources_per_worker_not_none == {"CPU": 4.0, "GPU": 1.0}
    with pytest.warns(UserWarning, match="ignoring the GPU"):
        s = ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"GPU": 1})
    assert s._resources_per_worker_not_none == {"CPU": 1.0}
    with pytest.raises(ValueError, match="num_workers"):
        ScalingConfig(num_workers=0)
    with pytest.raises(ValueError, match="placement_strategy"):
        ScalingConfig(num_workers=1, placement_strategy="TIGHT")


def test_progress_lines_are_throttled_but_the_last_one_shows():
    import io

    from raylite.train._internal.progress import ProgressReporter

    now = [0.0]
    out = io.StringIO()
    rep = ProgressReporter("TorchTrainer", 1, out, clock=lambda: now[0])
    for i in range(1, 21):
        rep.reported({"training_iteration": i, "loss": 1.0 / i}, None)
    rep.finished("finished", 20, 1.0, "/tmp/x")
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines[:5]] == ["1", "2", "3", "4", "5"]
    assert "iter 20" in lines[5] and "+14 report(s) not shown" in lines[5]
    assert lines[6].startswith("(TorchTrainer) finished after 20 report(s)")
    quiet = io.StringIO()
    ProgressReporter("T", 0, quiet).reported({"x": 1}, None)
    assert quiet.getvalue() == ""


def test_progress_per_epoch_where_the_config_gives_the_number_of_epochs():
    import io

    from raylite.train._internal.progress import ProgressReporter, epochs_total

    assert epochs_total({"num_epochs": 4, "lr": 0.1}) == 4 and epochs_total({"epochs": 3}) == 3
    assert epochs_total({"lr": 0.1}) is None and epochs_total(None) is None
    assert epochs_total({"epochs": True}) is None
    out = io.StringIO()
    rep = ProgressReporter("TorchTrainer", 1, out, clock=lambda: 0.0, epochs=4)
    for epoch in range(4):  # 10 s per epoch, counted from 0 as Lightning does
        rep.reported({"training_iteration": epoch + 1, "time_total_s": 10.0 * (epoch + 1),
                      "epoch": epoch, "loss": 0.5}, None)
    lines = out.getvalue().splitlines()
    assert "epoch 1/4 25% ETA 0:00:30" in lines[0], lines[0]
    assert "epoch 3/4 75% ETA 0:00:10" in lines[2], lines[2]
    assert "epoch 4/4 100%" in lines[3] and "ETA" not in lines[3], lines[3]
    one_based = io.StringIO()
    rep = ProgressReporter("T", 1, one_based, clock=lambda: 0.0, epochs=2)
    rep.reported({"epoch": 1, "time_total_s": 5.0}, None)
    assert "epoch 1/2 50% ETA 0:00:05" in one_based.getvalue()
    plain = io.StringIO()
    ProgressReporter("T", 1, plain, clock=lambda: 0.0).reported({"epoch": 1, "loss": 1.0}, None)
    assert "ETA" not in plain.getvalue() and "epoch=1" in plain.getvalue()
