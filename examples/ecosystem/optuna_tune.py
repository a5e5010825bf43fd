"""Optuna's TPE through Ray Tune: OptunaSearch + ASHAScheduler + ConcurrencyLimiter.

A simulated training curve stands in for a model: the loss of config (x, kind) after `step`
epochs is `final * (1 + 4 / step)`, where `final` is a quadratic with its minimum 0 at x=3,
kind="good". On Ray (ray), Tune runs 24 trials, at most 2 at a time, ASHA stopping the poor ones
after 1 or 3 epochs. Natively (native), Optuna's own `study.optimize` runs the same 24 configs'
worth of search with the same seeded sampler, each to the end. Both report the best final loss
found; the Ray mode also reports what proves Tune did its part (ASHA stopped trials early,
concurrency stayed at 2, every reported loss is the curve's value for that trial's config).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402

TRIALS = 24
EPOCHS = 9


def final_loss(x: float, kind: str) -> float:
    return (x - 3.0) ** 2 + (0.0 if kind == "good" else 4.0)


def curve(x: float, kind: str, step: int) -> float:
    return final_loss(x, kind) * (1 + 4 / step)


def on_ray(cpus: int) -> dict:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    def trainable(config):
        start = time.time()
        for step in range(1, EPOCHS + 1):
            time.sleep(0.02)
            tune.report({"loss": curve(config["x"], config["kind"], step), "start": start,
                         "now": time.time()})

    searcher = ConcurrencyLimiter(OptunaSearch(seed=0), max_concurrent=2)
    scheduler = ASHAScheduler(max_t=EPOCHS, grace_period=1, reduction_factor=3)
    tuner = tune.Tuner(
        trainable,
        param_space={"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=searcher,
                                    scheduler=scheduler, num_samples=TRIALS),
        run_config=tune.RunConfig(storage_path=str(Path.cwd() / "ray_results"), verbose=0),
    )
    grid = tuner.fit()
    frame = grid.get_dataframe()
    consistent = all(
        abs(r.metrics["loss"] - curve(r.config["x"], r.config["kind"], r.metrics["training_iteration"])) < 1e-9
        for r in grid)
    spans = [(r.metrics["start"], r.metrics["now"]) for r in grid]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    best = grid.get_best_result()
    iterations = sorted(int(i) for i in frame["training_iteration"])
    return {"trials": len(grid), "errors": len(grid.errors),
            "best_final_loss": final_loss(best.config["x"], best.config["kind"]),
            "best_kind": best.config["kind"], "stopped_early": sum(i < EPOCHS for i in iterations),
            "ran_to_the_end": sum(i == EPOCHS for i in iterations),
            "max_concurrent_seen": overlap, "reported_losses_consistent": consistent}


def native(cpus: int) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial):
        x = trial.suggest_float("x", -10, 10)
        kind = trial.suggest_categorical("kind", ["good", "bad"])
        return final_loss(x, kind)

    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=TRIALS)
    return {"trials": len(study.trials), "best_final_loss": study.best_value,
            "best_kind": study.best_params["kind"]}


if __name__ == "__main__":
    main(on_ray, native, start_ray)
