"""The libraries that call Ray Tune, unmodified, through `import ray` (raylite via compat/ray),
each checked against its own non-Ray mode: transformers' hyperparameter_search, Optuna through
OptunaSearch + ASHA + ConcurrencyLimiter, and FLAML's AutoML with two concurrent trials."""

import pytest

from tests.ecosystem._programs import require, run


@pytest.mark.slow
def test_transformers_hyperparameter_search_on_ray_gives_each_lr_its_native_eval_loss(tmp_path):
    require("transformers", "transformers>=4.40")
    pytest.importorskip("torch", reason="torch is not installed: pip install 'torch==2.13.0'")
    # each trial's worker imports transformers and torch: minutes on a loaded 2-core machine
    on_ray = run("hf_hyperparameter_search", "ray", tmp_path, timeout_s=1200)
    native = run("hf_hyperparameter_search", "native", tmp_path)
    assert on_ray["ray_backend"] == "raylite"
    assert set(on_ray["result"]["eval_loss_by_lr"]) == {"0.003", "0.0003"}
    for lr, loss in native["result"]["eval_loss_by_lr"].items():
        assert on_ray["result"]["eval_loss_by_lr"][lr] == pytest.approx(loss, abs=2e-4), lr
    assert on_ray["result"]["best_lr"] == native["result"]["best_lr"]


def test_optuna_search_with_asha_and_a_concurrency_limit(tmp_path):
    require("optuna", "optuna==5.0.0")
    on_ray = run("optuna_tune", "ray", tmp_path)
    native = run("optuna_tune", "native", tmp_path)
    assert on_ray["ray_backend"] == "raylite"
    got, own = on_ray["result"], native["result"]
    assert got["trials"] == own["trials"] == 24 and got["errors"] == 0
    assert got["reported_losses_consistent"]
    assert got["stopped_early"] >= 8 and got["ran_to_the_end"] >= 1  # ASHA cut the poor trials
    assert got["max_concurrent_seen"] <= 2
    # the same seeded TPE, two at a time and pruned by ASHA, lands as near the optimum
    assert got["best_kind"] == own["best_kind"] == "good"
    assert got["best_final_loss"] <= max(0.5, 4 * own["best_final_loss"])


@pytest.mark.slow
def test_flaml_automl_with_two_concurrent_trials_switches_to_ray_and_scores_like_its_own_loop(tmp_path):
    require("flaml", "flaml==2.8.0")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install 'scikit-learn==1.9.1'")
    on_ray = run("flaml_automl", "ray", tmp_path, timeout_s=1200)
    native = run("flaml_automl", "native", tmp_path)
    assert on_ray["ray_backend"] == "raylite"
    got, own = on_ray["result"], native["result"]
    assert got["used_ray"] and not own["used_ray"]
    assert got["best_estimator"] and own["best_estimator"]
    assert got["best_val_accuracy"] == pytest.approx(own["best_val_accuracy"], abs=0.06)
    assert got["test_accuracy"] == pytest.approx(own["test_accuracy"], abs=0.06)
