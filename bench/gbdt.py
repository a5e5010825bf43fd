"""GBDT benchmark: LightGBMTrainer and XGBoostTrainer on a 1M-row table, 2 workers, raylite vs Ray.

    python bench/gbdt.py                         # raylite, then Ray 2.60 from /opt/rayvenv
    python bench/gbdt.py --no-ray --reps 1       # quicker
    python bench/gbdt.py --library lightgbm      # one library only

The job (issue 36): a synthetic binary-classification table of 1,000,000 rows and 10
float features, made on the driver as a pandas DataFrame and handed to Data with
``from_pandas``; each of 2 workers reads its shard (``get_dataset_shard("train")``,
``materialize().to_pandas()``), builds the library's dataset and trains 20 rounds
data-parallel with ``RayTrainReportCallback``; the driver loads the final model and
scores the whole table. The same program runs under both frameworks (this script in
worker mode, under each one's interpreter).

Per framework and library, medians over --reps fits (the cluster already up):
    fit_s        trainer.fit() call to return
    peak_mib     peak memory of the driver and every process it started (PSS: shared
                 pages counted once), sampled every 0.2 s across init and all fits
    logloss      the final model's log loss on the whole table (both frameworks should
                 agree with each other and with the library alone)
    init_s       starting the cluster
The raylite worker also times the library alone on all rows in one process
(``single_s``), the floor for a 2-worker run on a 2-core machine.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    MIB,
    Metric,
    collect_worker_metrics,
    emit,
    median,
    render_table,
    section,
    tree_memory,
)

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
ROWS, FEATURES, ROUNDS, WORKERS = 1_000_000, 10, 20, 2
LIBRARIES = ("lightgbm", "xgboost")


def metrics_for(library: str) -> list[Metric]:
    return [
        Metric(f"{library}_fit_s", f"{library}: fit(), 20 rounds", "s", True),
        Metric(f"{library}_peak_mib", f"{library}: peak memory, all processes", "MiB", True),
        Metric(f"{library}_logloss", f"{library}: final model's log loss", "", True),
        Metric(f"{library}_single_s", f"{library}: the library alone, 1 process", "s", True),
    ]


METRICS = [m for lib in LIBRARIES for m in metrics_for(lib)] + [
    Metric("init_s", "cluster start", "s", True)
]


# ---------------------------------------------------------------------------------------------
# the job, identical for both frameworks


def make_table():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES))
    logit = x[:, 0] - 0.7 * x[:, 1] + 0.4 * x[:, 2] * x[:, 3] + 0.5 * rng.normal(size=ROWS)
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(FEATURES)])
    df["y"] = (logit > 0).astype("int64")
    return df


def lightgbm_loop(config):
    import lightgbm
    from ray import train
    from ray.train.lightgbm import RayTrainReportCallback, get_network_params

    df = train.get_dataset_shard("train").materialize().to_pandas()
    x, y = df.drop(columns="y"), df["y"]
    params = {"objective": "binary", "metric": "binary_logloss", "verbose": -1,
              "num_leaves": 31, "tree_learner": "data_parallel", "pre_partition": True,
              **get_network_params()}
    data = lightgbm.Dataset(x, label=y)
    lightgbm.train(params, data, num_boost_round=ROUNDS, valid_sets=[data], valid_names=["train"],
                   callbacks=[RayTrainReportCallback()])


def xgboost_loop(config):
    import xgboost
    from ray import train
    from ray.train.xgboost import RayTrainReportCallback

    df = train.get_dataset_shard("train").materialize().to_pandas()
    data = xgboost.DMatrix(df.drop(columns="y"), label=df["y"])
    params = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist",
              "max_depth": 6}
    xgboost.train(params, data, num_boost_round=ROUNDS, evals=[(data, "train")],
                  verbose_eval=False, callbacks=[RayTrainReportCallback()])


def logloss(y, p) -> float:
    import numpy as np

    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def fit_once(ray, library: str, df, storage: str) -> float:
    """One fit; returns the final model's log loss on the whole table."""
    import xgboost  # noqa: F401 - both libraries load before the clock starts
    from ray.train import RunConfig, ScalingConfig

    module = importlib.import_module(f"ray.train.{library}")
    trainer_cls = module.LightGBMTrainer if library == "lightgbm" else module.XGBoostTrainer
    loop = lightgbm_loop if library == "lightgbm" else xgboost_loop
    trainer = trainer_cls(
        loop,
        datasets={"train": ray.data.from_pandas(df)},
        scaling_config=ScalingConfig(num_workers=WORKERS),
        run_config=RunConfig(storage_path=storage),  # Ray 2.60 refuses verbose=
    )
    result = trainer.fit()
    booster = module.RayTrainReportCallback.get_model(result.checkpoint)
    features = df.drop(columns="y")
    if library == "xgboost":
        import xgboost as xgb

        features = xgb.DMatrix(features)
    return logloss(df["y"].to_numpy(), booster.predict(features))


def single_process(library: str, df) -> float:
    t0 = time.perf_counter()
    x, y = df.drop(columns="y"), df["y"]
    if library == "lightgbm":
        import lightgbm

        lightgbm.train({"objective": "binary", "verbose": -1, "num_leaves": 31},
                       lightgbm.Dataset(x, label=y), ROUNDS)
    else:
        import xgboost

        xgboost.train({"objective": "binary:logistic", "tree_method": "hist", "max_depth": 6},
                      xgboost.DMatrix(x, label=y), ROUNDS)
    return time.perf_counter() - t0


class PeakMemory:
    """Samples this process tree's PSS on a thread; ``peak`` is the largest seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            mem = tree_memory(os.getpid())
            self.peak = max(self.peak, mem.pss_bytes if mem.pss_bytes is not None else mem.rss_bytes)

    def reset(self) -> None:
        self.peak = 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def worker(framework: str, libraries: list[str], reps: int) -> None:
    import tempfile

    ray = importlib.import_module("ray" if framework == "ray" else "raylite")
    sys.modules.setdefault("ray", ray)  # the loops say `from ray import train` on both
    df = make_table()
    memory = PeakMemory()
    t0 = time.perf_counter()
    ray.init(num_cpus=WORKERS + 1, include_dashboard=False)
    emit({"framework": framework, "metric": "init_s", "value": time.perf_counter() - t0})
    try:
        for library in libraries:
            with section(framework, library), tempfile.TemporaryDirectory() as storage:
                memory.reset()
                times, losses = [], []
                for _ in range(reps):
                    t = time.perf_counter()
                    losses.append(fit_once(ray, library, df, storage))
                    times.append(time.perf_counter() - t)
                emit({"framework": framework, "metric": f"{library}_fit_s", "value": median(times),
                      "runs": times})
                emit({"framework": framework, "metric": f"{library}_peak_mib",
                      "value": memory.peak / MIB})
                emit({"framework": framework, "metric": f"{library}_logloss", "value": median(losses)})
    finally:
        ray.shutdown()
        memory.stop()
    if framework == "raylite":
        for library in libraries:
            with section(framework, f"{library} alone"):
                emit({"framework": framework, "metric": f"{library}_single_s",
                      "value": median([single_process(library, df) for _ in range(reps)])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--worker", choices=["raylite", "ray"])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--library", choices=[*LIBRARIES, "both"], default="both")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    parser.add_argument("--timeout-s", type=float, default=1800)
    args = parser.parse_args()
    libraries = list(LIBRARIES) if args.library == "both" else [args.library]
    if args.worker:
        worker(args.worker, libraries, args.reps)
        return
    names = {m.name for m in METRICS}
    here = os.path.abspath(__file__)
    common = ["--reps", str(args.reps), "--library", args.library]
    results = {"raylite": collect_worker_metrics(
        "raylite", [sys.executable, here, "--worker", "raylite", *common], names, args.timeout_s)}
    frameworks = ["raylite"]
    if not args.no_ray and os.path.exists(args.ray_python):
        # a loaded shared machine starts Ray's raylet slowly; its default 60 s wait then fails
        os.environ.setdefault("RAY_raylet_start_wait_time_s", "600")
        results["ray"] = collect_worker_metrics(
            "ray", [args.ray_python, here, "--worker", "ray", *common], names, args.timeout_s)
        frameworks.append("ray")
    print(render_table(METRICS, results, frameworks), file=sys.stderr)


if __name__ == "__main__":
    main()
