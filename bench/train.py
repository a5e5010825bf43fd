"""Train benchmark: one 2-worker DDP job under raylite, raw torch.distributed and Ray.

    python bench/train.py                      # raylite, raw mp.spawn, and Ray from /opt/rayvenv
    python bench/train.py --no-ray --reps 1    # quicker
    python bench/train.py --preload ''         # without the 'raylite+preload' column

The job (issue 5): an MLP on 200,000 synthetic rows, 3 epochs, 2 workers on gloo, a
checkpoint per epoch written by rank 0. The loop is the same function for raylite and
Ray (`train.report` with a Checkpoint); the raw baseline is the same model, data and
sampler under `torch.multiprocessing.spawn`, saving with `torch.save`, one intra-op
thread per process as torchrun does.

Each framework is measured by this script run in worker mode under that framework's
interpreter (Ray lives in its own virtualenv). Per framework, medians over --reps runs:
    total_s       fit() (or mp.spawn) call to return, cluster already up
    first_step_s  fit() (or mp.spawn) call to the end of rank 0's first optimizer step
    train_s       rank 0's time in its epochs (the training work itself)
    init_s        starting the cluster (raylite.init / ray.init; 0 for raw)
The table (stderr) compares raylite with the issue's targets: total within 10% of raw
torch.distributed, and fit() to first step under 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Metric, emit, format_value, median, render_table  # noqa: E402

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
ROWS, FEATURES, HIDDEN, EPOCHS, BATCH, WORKERS = 200_000, 32, 256, 3, 512, 2

METRICS = [
    Metric("total_s", "fit() total, 3 epochs", "s", True),
    Metric("overhead_vs_raw", "total / raw torch.distributed total", "x", True, 1.10),
    Metric("first_step_s", "fit() to first training step", "s", True, 2.0),
    Metric("train_s", "rank 0 time in epochs", "s", True),
    Metric("init_s", "cluster start", "s", True),
]


# ---------------------------------------------------------------------------------------------
# the job, identical for every framework


def make_data():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(ROWS, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def make_model():
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 1),
    )


def run_epochs(model, loader, epoch_end, t_fit: float) -> dict:
    """The training loop proper; ``epoch_end(epoch, loss, model, timings)`` checkpoints.

    The timings travel with every epoch's report, so the last checkpoint's metrics
    hold them (Ray 2.60 keeps only metrics reported with a checkpoint)."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    timings: dict = {}
    t_train = time.time()
    for epoch in range(EPOCHS):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timings.setdefault("first_step_s", time.time() - t_fit)
        timings["train_s"] = time.time() - t_train
        epoch_end(epoch, loss.item(), model, timings)
    return timings


def framework_loop(config: dict) -> None:
    """Runs in each raylite or Ray training worker."""
    import importlib
    import shutil

    import torch

    fw = importlib.import_module(config["framework"])
    importlib.import_module(config["framework"] + ".train.torch")
    train = fw.train
    loader = torch.utils.data.DataLoader(make_data(), batch_size=BATCH, shuffle=True)
    loader = train.torch.prepare_data_loader(loader)
    model = train.torch.prepare_model(make_model())
    rank = train.get_context().get_world_rank()

    def epoch_end(epoch: int, loss: float, model, timings: dict) -> None:
        metrics = {"epoch": epoch, "loss": loss, **timings}
        if rank == 0:
            d = tempfile.mkdtemp()
            torch.save(model.module.state_dict(), os.path.join(d, "model.pt"))
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
            shutil.rmtree(d, ignore_errors=True)
        else:
            train.report(metrics)

    run_epochs(model, loader, epoch_end, config["t_fit"])


def raw_rank(rank: int, port: int, t_fit: float, out_dir: str) -> None:
    """One process of the raw torch.distributed baseline."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # torchrun's default with several processes per machine
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORKERS)
    data = make_data()
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=WORKERS, rank=rank, shuffle=True)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(make_model())

    def epoch_end(epoch: int, loss: float, model, timings: dict) -> None:
        if rank == 0:
            d = os.path.join(out_dir, f"checkpoint_{epoch:06d}")
            os.makedirs(d, exist_ok=True)
            torch.save(model.module.state_dict(), os.path.join(d, "model.pt"))

    timings = run_epochs(model, loader, epoch_end, t_fit)
    if rank == 0:
        with open(os.path.join(out_dir, "timings.json"), "w") as f:
            json.dump(timings, f)
    dist.destroy_process_group()



# ---------------------------------------------------------------------------------------------
# worker mode: measure one framework, print JSON lines


def measure_raw(reps: int) -> list[dict]:
    import socket

    import torch.multiprocessing as mp

    runs = []
    for _ in range(reps):
        out_dir = tempfile.mkdtemp(prefix="bench_raw_")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        t_fit = time.time()
        mp.spawn(raw_rank, args=(port, t_fit, out_dir), nprocs=WORKERS)
        total = time.time() - t_fit
        with open(os.path.join(out_dir, "timings.json")) as f:
            runs.append({"total_s": total, "init_s": 0.0, **json.load(f)})
    return runs


def measure_framework(name: str, reps: int) -> list[dict]:
    import importlib

    fw = importlib.import_module(name)
    importlib.import_module(name + ".train.torch")
    started = time.time()
    fw.init(num_cpus=WORKERS)
    init_s = time.time() - started
    runs = []
    for i in range(reps):
        storage = tempfile.mkdtemp(prefix=f"bench_{name}_")
        quiet = {"verbose": 0} if name == "raylite" else {}  # Ray 2.60 rejects `verbose`
        t_fit = time.time()
        trainer = fw.train.torch.TorchTrainer(
            framework_loop,
            train_loop_config={"framework": name, "t_fit": t_fit},
            scaling_config=fw.train.ScalingConfig(num_workers=WORKERS),
            run_config=fw.train.RunConfig(storage_path=storage, name=f"bench{i}", **quiet),
        )
        result = trainer.fit()
        total = time.time() - t_fit
        last = result.metrics
        runs.append({"total_s": total, "init_s": init_s, "first_step_s": last["first_step_s"],
                     "train_s": last["train_s"]})
    fw.shutdown()
    return runs


def run_worker(name: str, reps: int) -> None:
    runs = measure_raw(reps) if name == "torch" else measure_framework(name, reps)
    for metric in ("total_s", "first_step_s", "train_s", "init_s"):
        values = [r[metric] for r in runs]
        emit({"framework": name, "metric": metric, "value": median(values), "samples": values})


# ---------------------------------------------------------------------------------------------
# parent mode


def run_framework(name: str, python: str, reps: int, timeout_s: float,
                  extra_env: dict[str, str] | None = None, label: str | None = None) -> dict[str, float]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0", **(extra_env or {}))
    if name == "ray":
        env.pop("PYTHONPATH", None)  # keep raylite's paths out of Ray's interpreter
    cmd = [python, os.path.abspath(__file__), "--worker", name, "--reps", str(reps)]
    results: dict[str, float] = {}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"bench: {name} ran past {timeout_s:.0f} s", file=sys.stderr)
        return results
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if label:
                record["framework"] = label
            print(json.dumps(record), flush=True)
            results[record["metric"]] = record["value"]
    if proc.returncode != 0:
        print(f"bench: {name} exited with {proc.returncode}:\n{proc.stderr[-3000:]}", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON)
                        else None, help="interpreter with Ray and torch installed")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per framework")
    parser.add_argument("--preload", default="torch,torch._dynamo", metavar="MODULES",
                        help="also run raylite with RAYLITE_PRELOAD_MODULES=MODULES (column "
                             "'raylite+preload'; '' to skip): DDP's constructor imports "
                             "torch._dynamo, which raylite's default preload (torch) leaves out")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.reps)
        return 0

    # (column, interpreter, worker mode, extra environment)
    runs: list[tuple[str, str, str, dict[str, str]]] = [
        ("raylite", sys.executable, "raylite", {}), ("torch", sys.executable, "torch", {})]
    if args.ray_python and not args.no_ray:
        runs.append(("ray", args.ray_python, "ray", {}))
    if args.preload:
        runs.append(("raylite+preload", sys.executable, "raylite", {"RAYLITE_PRELOAD_MODULES": args.preload}))
    results = {label: run_framework(worker, python, args.reps, args.timeout_s, env, label)
               for label, python, worker, env in runs}
    raw_total = results["torch"].get("total_s")
    for name, values in results.items():
        if raw_total and "total_s" in values:
            values["overhead_vs_raw"] = values["total_s"] / raw_total
            emit({"framework": name, "metric": "overhead_vs_raw", "value": values["overhead_vs_raw"]})
    names = [label for label, *_ in runs]
    with contextlib.suppress(BrokenPipeError):
        print(f"\nTrain benchmark: {WORKERS} workers, {ROWS:,} rows, {EPOCHS} epochs, "
              f"{os.cpu_count()} cores, medians of {args.reps}. 'torch' is raw mp.spawn.\n",
              file=sys.stderr)
        print(render_table(METRICS, results, names), file=sys.stderr)
        if raw_total:
            print(f"\nraw torch.distributed total: {format_value(raw_total)} s", file=sys.stderr)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
