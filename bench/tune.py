"""Tune benchmark: raylite and Ray 2.60 side by side, each in its own interpreter.

    python bench/tune.py                  # raylite, then Ray from /opt/rayvenv
    python bench/tune.py --no-ray --reps 1

Two runs (issue 38), each on a local 2-CPU cluster started once per framework:
  trivial  100 trials of a function trainable that reports 3 times (tune.report), default
           search and FIFO: whole fit() wall time, trials per second
  asha     ASHA (max_t=8, grace 1, reduction 2) over 16 trials of a small torch MLP on
           synthetic data (one epoch per report): fit() wall time, which is the time to the
           best result
Peak memory is the process tree's (the driver and everything it started: the cluster's
daemons and workers), sampled every 0.5 s by the parent process while the runs go; PSS (shared pages split between
their users) where /proc has it, else RSS. Medians over --reps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Metric, emit, median, render_table, tree_memory  # noqa: E402

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
MIB = 1024 * 1024

METRICS = [
    Metric("trivial_wall_s", "100 trivial trials x 3 reports, fit() wall", "s", True, 10.0),
    Metric("trivial_trials_per_s", "trivial trials per second", "1/s", False),
    Metric("asha_wall_s", "ASHA over 16 torch trials, fit() to best result", "s", True),
    Metric("trivial_peak_mib", "peak memory of the process tree, trivial trials", "MiB", True,
           300.0),
    Metric("peak_mib", "peak memory of the process tree, both runs (torch workers too)", "MiB",
           True),
    Metric("init_s", "cluster start", "s", True),
]


# ---------------------------------------------------------------------------------------------
# the runs, identical for both frameworks (`tune` is raylite's or Ray's)


def make_trainables(tune):
    """The two trainables, closing over this framework's `tune` module."""

    def trivial(config):
        for i in range(3):
            tune.report({"score": config["x"] * (i + 1)})

    def torch_trial(config):
        import torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        x = torch.randn(512, 16)
        y = (x.sum(dim=1, keepdim=True) > 0).float()
        model = torch.nn.Sequential(torch.nn.Linear(16, config["hidden"]), torch.nn.ReLU(),
                                    torch.nn.Linear(config["hidden"], 1))
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        loss_fn = torch.nn.BCEWithLogitsLoss()
        for _ in range(8):
            for i in range(0, 512, 64):
                opt.zero_grad()
                loss = loss_fn(model(x[i:i + 64]), y[i:i + 64])
                loss.backward()
                opt.step()
            with torch.no_grad():
                acc = ((model(x) > 0).float() == y).float().mean().item()
            tune.report({"acc": acc})

    return trivial, torch_trial


def run_worker(name: str, reps: int) -> None:
    if name == "ray":
        import ray
        from ray import tune
    else:
        import raylite as ray
        from raylite import tune
    if name == "ray":
        from ray.tune.schedulers import ASHAScheduler
    else:
        from raylite.tune.schedulers import ASHAScheduler
    trivial, torch_trial = make_trainables(tune)

    storage = tempfile.mkdtemp(prefix=f"bench-tune-{name}-")
    samples: dict[str, list[float]] = {"trivial_wall_s": [], "trivial_trials_per_s": [],
                                       "asha_wall_s": []}
    # the parent samples this process tree's memory (a sampler here would slow it)
    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False)
    init_s = time.perf_counter() - start
    for rep in range(reps):
        emit({"phase": "trivial"})
        start = time.perf_counter()
        grid = tune.Tuner(
            trivial, param_space={"x": tune.uniform(0, 1)},
            tune_config=tune.TuneConfig(num_samples=100, metric="score", mode="max"),
            run_config=tune.RunConfig(storage_path=storage, name=f"trivial{rep}",
                                      verbose=0)).fit()
        wall = time.perf_counter() - start
        assert len(grid) == 100 and not grid.errors, grid.errors
        samples["trivial_wall_s"].append(wall)
        samples["trivial_trials_per_s"].append(100 / wall)
        emit({"phase": "asha"})
        start = time.perf_counter()
        grid = tune.Tuner(
            torch_trial,
            param_space={"lr": tune.loguniform(1e-3, 1.0),
                         "hidden": tune.choice([8, 32, 64])},
            tune_config=tune.TuneConfig(
                num_samples=16, metric="acc", mode="max",
                scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)),
            run_config=tune.RunConfig(storage_path=storage, name=f"asha{rep}",
                                      verbose=0)).fit()
        best = grid.get_best_result()
        samples["asha_wall_s"].append(time.perf_counter() - start)
        emit({"framework": name, "metric": "asha_best_acc", "value": best.metrics["acc"]})
    ray.shutdown()
    for metric, values in samples.items():
        emit({"framework": name, "metric": metric, "value": median(values), "samples": values})
    emit({"framework": name, "metric": "init_s", "value": init_s})


# ---------------------------------------------------------------------------------------------
# parent mode


def run_framework(name: str, python: str, reps: int, timeout_s: float) -> dict[str, float]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0")
    if name == "ray":
        env.pop("PYTHONPATH", None)  # keep raylite's paths out of Ray's interpreter
        # a loaded machine starts Ray's raylet slower than its 60 s default wait
        env.setdefault("RAY_raylet_start_wait_time_s", "300")
    cmd = [python, os.path.abspath(__file__), "--worker", name, "--reps", str(reps)]
    results: dict[str, float] = {}
    peaks = {"all": 0, "trivial": 0}
    phase = {"now": ""}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()

    def read_stdout() -> None:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "phase" in record:
                phase["now"] = record["phase"]
                continue
            print(json.dumps(record), flush=True)
            results[record["metric"]] = record["value"]

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        mem = tree_memory(proc.pid)  # from this process: sampling costs the worker nothing
        used = mem.pss_bytes or mem.rss_bytes
        peaks["all"] = max(peaks["all"], used)
        if phase["now"] == "trivial":
            peaks["trivial"] = max(peaks["trivial"], used)
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
        print(f"bench: {name} ran past {timeout_s:.0f} s", file=sys.stderr)
    reader.join(timeout=10)
    for metric, key in (("trivial_peak_mib", "trivial"), ("peak_mib", "all")):
        if peaks[key]:
            results[metric] = peaks[key] / MIB
            emit({"framework": name, "metric": metric, "value": results[metric]})
    if proc.returncode:
        print(f"bench: {name} exited with {proc.returncode}:\n{''.join(stderr)[-3000:]}",
              file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON
                        if os.path.exists(DEFAULT_RAY_PYTHON) else None)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per framework")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.reps)
        return 0
    names = ["raylite"] + (["ray"] if args.ray_python and not args.no_ray else [])
    pythons = {"raylite": sys.executable, "ray": args.ray_python}
    results = {name: run_framework(name, pythons[name], args.reps, args.timeout_s)
               for name in names}
    with contextlib.suppress(BrokenPipeError):
        print(f"\nTune benchmark: 2-CPU local cluster, {os.cpu_count()} cores, medians of "
              f"{args.reps}.\n", file=sys.stderr)
        print(render_table(METRICS, results, names), file=sys.stderr)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
