"""Core benchmark: raylite and Ray side by side, in one run.

    python bench/core.py                       # raylite, and Ray from /opt/rayvenv when present
    python bench/core.py --ray-python PATH     # Ray from another interpreter
    python bench/core.py --no-ray --quick      # raylite only, fewer repetitions

Every measurement for one framework is made by this same script run as a subprocess in worker
mode (`--worker raylite` or `--worker ray`) under that framework's interpreter, so both are
measured by identical code. Workers print one JSON line per metric; this parent echoes them on
stdout and, at the end, prints a side-by-side Markdown table with the issue's targets and
raylite's advantage on stderr (so `> results.jsonl` keeps stdout pure JSON lines).

Numbers are medians. Both frameworks get `init(num_cpus=2)` and otherwise their defaults.
Import, init and shutdown times are taken in fresh interpreters (a second `init()` in one
process would be warm). Memory is the sum over the driver and every process below it, read
from /proc: RSS (double-counts pages shared between forked workers), PSS (shared pages split
between their users: the honest total) and USS (private pages only).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402  (this folder is not a package)
    MIB,
    Metric,
    collect_worker_metrics,
    descendants,
    emit,
    median,
    render_table,
    sample,
    section,
    tree_memory,
)

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
NUM_TASKS = 5_000
ARRAY_BYTES = 100 * MIB

METRICS = [
    Metric("import_s", "import", "s", True),
    Metric("init_s", "init()", "s", True, 0.3),
    Metric("first_task_s", "first task after init()", "s", True),
    Metric("task_rtt_ms", "task round trip", "ms", True, 0.3),
    Metric("task_throughput", "task throughput, 5,000 no-op tasks", "tasks/s", False, 5_000),
    Metric("actor_rtt_ms", "actor call round trip", "ms", True, 0.3),
    Metric("actor_throughput", "actor call throughput, 5,000 calls", "calls/s", False, 10_000),
    Metric("put_gbps", "put 100 MiB numpy array", "GB/s", False),
    Metric("put_ms", "put 100 MiB numpy array", "ms", True),
    Metric("get_gbps", "get 100 MiB numpy array", "GB/s", False),
    Metric("get_ms", "get 100 MiB numpy array", "ms", True),
    Metric("task_arg_100mib_ms", "task with the 100 MiB ref as argument", "ms", True),
    Metric("init_nodash_s", "init(include_dashboard=False)", "s", True),
    Metric("tree_rss_idle_mib", "process tree RSS after init", "MiB", True),
    Metric("tree_pss_idle_mib", "process tree PSS after init", "MiB", True),
    Metric("api_first_request_ms", "first HTTP API request after init (GET /api/version)", "ms", True),
    Metric("tree_rss_api_mib", "process tree RSS with the HTTP API server running", "MiB", True),
    Metric("tree_pss_api_mib", "process tree PSS with the HTTP API server running", "MiB", True),
    Metric("tree_rss_mib", "process tree RSS under load", "MiB", True, 300),
    Metric("tree_pss_mib", "process tree PSS under load", "MiB", True),
    Metric("tree_uss_mib", "process tree USS under load", "MiB", True),
    Metric("tree_processes", "processes in the tree", "count", True),
    Metric("shutdown_s", "shutdown()", "s", True, 0.3),
    Metric("teardown_s", "shutdown() until no process is left", "s", True),
]
METRICS_BY_NAME = {m.name: m for m in METRICS}


class Repeats:
    """How often each measurement runs; `--quick` trades stability for speed."""

    def __init__(self, quick: bool) -> None:
        self.import_runs = 1 if quick else 5
        self.init_probes = 0 if quick else 2  # plus the worker's own init
        self.rtt_calls = 200 if quick else 2_000
        self.rtt_max_s = 1.0 if quick else 5.0
        self.throughput_rounds = 1 if quick else 3
        self.array_runs = 2 if quick else 5


# ---------------------------------------------------------------------------------------------
# worker mode: measure one framework in this interpreter


def report(framework: str, name: str, value: float, samples: list[float] | None = None,
           **extra: object) -> None:
    """One JSON line for a metric; `samples` (in the metric's unit) are listed when few."""
    metric = METRICS_BY_NAME[name]
    record: dict = {"framework": framework, "metric": name, "value": value, "unit": metric.unit}
    if metric.target is not None:
        record["target"] = metric.target
        record["meets_target"] = metric.meets(value)
    if samples is not None:
        record["samples"] = len(samples)
        if len(samples) <= 10:
            record["runs"] = [round(x, 6) for x in samples]
    record.update(extra)
    emit(record)


def to_ms(seconds: list[float]) -> list[float]:
    return [s * 1e3 for s in seconds]


def to_gbps(seconds: list[float]) -> list[float]:
    return [ARRAY_BYTES / s / 1e9 for s in seconds]


def noop() -> None:
    return None


def array_nbytes(array) -> int:
    return int(array.nbytes)


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


def time_import(module_name: str, runs: int) -> list[float]:
    code = (f"import time; start = time.perf_counter(); import {module_name}; "
            "print(time.perf_counter() - start)")
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return times


def probe_init(module_name: str, num_cpus: int, dashboard: bool = True) -> None:
    """Fresh-interpreter mode: time init(), the first task and shutdown(); print one JSON line."""
    framework = importlib.import_module(module_name)
    start = time.perf_counter()
    framework.init(num_cpus=num_cpus, **({} if dashboard else {"include_dashboard": False}))
    init_s = time.perf_counter() - start
    task = framework.remote(noop)
    start = time.perf_counter()
    framework.get(task.remote())
    first_task_s = time.perf_counter() - start
    shutdown_s, teardown_s, _ = timed_shutdown(framework)
    emit({"init_s": init_s, "first_task_s": first_task_s, "shutdown_s": shutdown_s,
          "teardown_s": teardown_s})


def run_probes(module_name: str, num_cpus: int, runs: int, dashboard: bool = True) -> list[dict]:
    results = []
    for _ in range(runs):
        extra = [] if dashboard else ["--no-dashboard"]
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe-init", module_name,
                              "--num-cpus", str(num_cpus), *extra], capture_output=True, text=True, timeout=120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"init probe for {module_name} failed:\n{out.stderr[-2000:]}")
        results.append(json.loads(lines[-1]))
    return results


def timed_shutdown(framework) -> tuple[float, float, int]:
    """shutdown() time, time until every child process is gone, and how many were left at return."""
    me = os.getpid()
    start = time.perf_counter()
    framework.shutdown()
    shutdown_s = time.perf_counter() - start
    left_at_return = len(descendants(me)) - 1
    deadline = start + 10.0
    while len(descendants(me)) > 1 and time.perf_counter() < deadline:
        time.sleep(0.005)
    return shutdown_s, time.perf_counter() - start, left_at_return


def report_memory(framework_name: str, suffix: str) -> None:
    memory = tree_memory(os.getpid())
    if suffix in ("idle", "api"):
        report(framework_name, f"tree_rss_{suffix}_mib", memory.rss_bytes / MIB, processes=memory.processes)
        if memory.pss_bytes is not None:
            report(framework_name, f"tree_pss_{suffix}_mib", memory.pss_bytes / MIB)
        return
    report(framework_name, "tree_rss_mib", memory.rss_bytes / MIB, processes=memory.processes)
    if memory.pss_bytes is not None:
        report(framework_name, "tree_pss_mib", memory.pss_bytes / MIB)
        report(framework_name, "tree_uss_mib", memory.uss_bytes / MIB)
    report(framework_name, "tree_processes", memory.processes)


def measure_api(context, name: str) -> None:
    """The head's HTTP API: time of the first request (raylite starts its server then) and the
    process tree's memory with the server running. Ray's dashboard runs from init() on."""
    import urllib.request

    url = "http://" + str(context.dashboard_url or "127.0.0.1:8265").split("/?")[0]  # raylite adds ?token=
    request = urllib.request.Request(url + "/api/version")
    token_file = os.path.join(str(context.get("session_dir") or ""), "token")
    if os.path.exists(token_file):
        with open(token_file) as f:
            request.add_header("Authorization", "Bearer " + f.read().strip())
    import urllib.error

    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            r.read()
    except urllib.error.HTTPError:  # Ray 2.60's dashboard may want its own token: it answered
        pass
    report(name, "api_first_request_ms", (time.perf_counter() - start) * 1e3)
    time.sleep(1.0)  # let the server settle (imports done, lazy state built)
    report_memory(name, "api")


def measure_tasks(fw, name: str, reps: Repeats) -> None:
    task = fw.remote(noop)
    fw.get([task.remote() for _ in range(200)])  # warm: workers started, function exported
    times = sample(lambda: fw.get(task.remote()), reps.rtt_calls, reps.rtt_max_s)
    report(name, "task_rtt_ms", median(times) * 1e3, to_ms(times),
           p90_ms=sorted(times)[int(len(times) * 0.9)] * 1e3)
    rates, submit_rates = [], []
    for _ in range(reps.throughput_rounds):
        start = time.perf_counter()
        refs = [task.remote() for _ in range(NUM_TASKS)]
        submitted = time.perf_counter()
        fw.get(refs)
        rates.append(NUM_TASKS / (time.perf_counter() - start))
        submit_rates.append(NUM_TASKS / (submitted - start))
        del refs
    report(name, "task_throughput", median(rates), rates, submit_per_s=median(submit_rates))


def measure_actor(fw, name: str, reps: Repeats):
    actor = fw.remote(Counter).remote()
    fw.get([actor.bump.remote() for _ in range(200)])
    times = sample(lambda: fw.get(actor.bump.remote()), reps.rtt_calls, reps.rtt_max_s)
    report(name, "actor_rtt_ms", median(times) * 1e3, to_ms(times),
           p90_ms=sorted(times)[int(len(times) * 0.9)] * 1e3)
    rates = []
    for _ in range(reps.throughput_rounds):
        start = time.perf_counter()
        refs = [actor.bump.remote() for _ in range(NUM_TASKS)]
        last = fw.get(refs)[-1]
        rates.append(NUM_TASKS / (time.perf_counter() - start))
        del refs
    expected = 200 + len(times) + NUM_TASKS * reps.throughput_rounds
    if last != expected:
        raise AssertionError(f"actor calls lost or reordered: count {last}, expected {expected}")
    report(name, "actor_throughput", median(rates), rates)
    return actor  # kept alive while memory is measured


def measure_arrays(fw, name: str, reps: Repeats) -> None:
    import numpy as np

    array = np.arange(ARRAY_BYTES // 8, dtype=np.float64)
    put_times, get_times = [], []
    for _ in range(reps.array_runs):
        start = time.perf_counter()
        ref = fw.put(array)
        put_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        value = fw.get(ref)
        get_times.append(time.perf_counter() - start)
        if value.nbytes != ARRAY_BYTES or value[-1] != array[-1]:
            raise AssertionError("get() returned a different array")
        del value, ref
    report(name, "put_ms", median(put_times) * 1e3, to_ms(put_times))
    report(name, "put_gbps", median(to_gbps(put_times)), to_gbps(put_times))
    report(name, "get_ms", median(get_times) * 1e3, to_ms(get_times))
    report(name, "get_gbps", median(to_gbps(get_times)), to_gbps(get_times))

    task = fw.remote(array_nbytes)
    array_ref = fw.put(array)
    if fw.get(task.remote(array_ref)) != ARRAY_BYTES:  # warm: the worker maps the object once
        raise AssertionError("the task saw a different array")
    times = sample(lambda: fw.get(task.remote(array_ref)), reps.array_runs * 2, 10.0)
    report(name, "task_arg_100mib_ms", median(times) * 1e3, to_ms(times))




def run_worker(module_name: str, num_cpus: int, quick: bool) -> None:
    reps = Repeats(quick)
    import_times = time_import(module_name, reps.import_runs)
    probes = run_probes(module_name, num_cpus, reps.init_probes)
    probes_nodash = run_probes(module_name, num_cpus, max(1, reps.init_probes + 1), dashboard=False)

    start = time.perf_counter()
    fw = importlib.import_module(module_name)
    import_times.append(time.perf_counter() - start)
    emit({"framework": module_name, "metric": "meta", "version": getattr(fw, "__version__", "?"),
          "python": sys.version.split()[0], "num_cpus": num_cpus, "quick": quick,
          "loadavg_1m": os.getloadavg()[0]})
    report(module_name, "import_s", median(import_times), import_times)

    start = time.perf_counter()
    context = fw.init(num_cpus=num_cpus)
    init_times = [time.perf_counter() - start] + [p["init_s"] for p in probes]
    report(module_name, "init_s", median(init_times), init_times)
    nodash = [p["init_s"] for p in probes_nodash]
    report(module_name, "init_nodash_s", median(nodash), nodash)
    task = fw.remote(noop)
    start = time.perf_counter()
    fw.get(task.remote())
    first = [time.perf_counter() - start] + [p["first_task_s"] for p in probes]
    report(module_name, "first_task_s", median(first), first)
    report_memory(module_name, "idle")
    with section(module_name, "api"):
        measure_api(context, module_name)

    with section(module_name, "tasks"):
        measure_tasks(fw, module_name, reps)
    actor = None
    with section(module_name, "actor"):
        actor = measure_actor(fw, module_name, reps)
    report_memory(module_name, "load")
    del actor
    with section(module_name, "arrays"):
        measure_arrays(fw, module_name, reps)

    shutdown_s, teardown_s, left = timed_shutdown(fw)
    shutdowns = [shutdown_s] + [p["shutdown_s"] for p in probes]
    teardowns = [teardown_s] + [p["teardown_s"] for p in probes]
    report(module_name, "shutdown_s", median(shutdowns), shutdowns, processes_left_at_return=left,
           loadavg_1m=os.getloadavg()[0])
    report(module_name, "teardown_s", median(teardowns), teardowns)


# ---------------------------------------------------------------------------------------------
# parent mode: run a worker per framework, echo its lines, print the table


def run_framework(module_name: str, python: str, num_cpus: int, quick: bool,
                  timeout_s: float) -> dict[str, float]:
    cmd = [python, os.path.abspath(__file__), "--worker", module_name, "--num-cpus", str(num_cpus)]
    if quick:
        cmd.append("--quick")
    return collect_worker_metrics(module_name, cmd, METRICS_BY_NAME, timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON)
                        else None, help="interpreter with Ray installed (default: %(default)s)")
    parser.add_argument("--no-ray", action="store_true", help="measure raylite only")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per framework")
    parser.add_argument("--worker", metavar="MODULE", help=argparse.SUPPRESS)
    parser.add_argument("--probe-init", metavar="MODULE", help=argparse.SUPPRESS)
    parser.add_argument("--no-dashboard", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.probe_init:
        probe_init(args.probe_init, args.num_cpus, dashboard=not args.no_dashboard)
        return 0
    if args.worker:
        run_worker(args.worker, args.num_cpus, args.quick)
        return 0

    runs = [("raylite", sys.executable)]
    if args.ray_python and not args.no_ray:
        runs.append(("ray", args.ray_python))
    results = {}
    started = time.perf_counter()
    for module_name, python in runs:
        results[module_name] = run_framework(module_name, python, args.num_cpus, args.quick,
                                             args.timeout_s)
    with contextlib.suppress(BrokenPipeError):
        print(f"\nCore benchmark, num_cpus={args.num_cpus}, {os.cpu_count()} cores, "
              f"{time.perf_counter() - started:.0f} s in all. 'ok'/'MISS' compares raylite with "
              "the target.\n", file=sys.stderr)
        print(render_table(METRICS, results, [name for name, _ in runs]), file=sys.stderr)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
