"""Object store benchmark: raylite and Ray side by side, in one run.

    python bench/objects.py                    # raylite, and Ray from /opt/rayvenv when present
    python bench/objects.py --no-ray --quick   # raylite only, fewer repetitions

Measures put/get of 1 MiB, 100 MiB and 1 GiB numpy arrays, a task taking a 100 MiB ref,
ten tasks sharing one 100 MiB ref (and whether the store grew: it should hold one copy),
a loop that puts and drops 100 MiB objects (time per put and the peak of shared memory, which
must stay flat), and spilling: putting 4x a small store's capacity, then reading every object
back (restores). Like bench/core.py, each framework is measured by this same script running
as a subprocess under that framework's interpreter; stdout is JSON lines, the side-by-side
table goes to stderr. Numbers are medians.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MIB, Metric, collect_worker_metrics, emit, median, render_table, section  # noqa: E402  (not a package)

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
SPILL_STORE_BYTES = 256 * MIB
SPILL_OBJECT_BYTES = 64 * MIB
SPILL_OBJECTS = 16  # 1 GiB through a 256 MiB store

METRICS = [
    Metric("put_1mib_gbps", "put 1 MiB", "GB/s", False),
    Metric("get_1mib_ms", "get 1 MiB", "ms", True),
    Metric("put_100mib_gbps", "put 100 MiB", "GB/s", False, 4.0),
    Metric("put_100mib_ms", "put 100 MiB", "ms", True),
    Metric("get_100mib_ms", "get 100 MiB (zero-copy)", "ms", True),
    Metric("put_1gib_gbps", "put 1 GiB", "GB/s", False),
    Metric("get_1gib_ms", "get 1 GiB (zero-copy)", "ms", True),
    Metric("task_arg_100mib_ms", "task with a 100 MiB ref argument", "ms", True, 10.0),
    Metric("ten_tasks_100mib_ms", "10 tasks sharing one 100 MiB ref", "ms", True),
    Metric("ten_tasks_extra_copies", "extra copies made for those 10 tasks", "count", True, 0),
    Metric("loop_put_ms", "put+drop 100 MiB loop, per put", "ms", True),
    Metric("loop_peak_shm_mib", "put+drop loop, /dev/shm growth", "MiB", True),
    Metric("spill_put_gbps", "put 1 GiB through a 256 MiB store (spilling)", "GB/s", False),
    Metric("restore_gbps", "get every spilled object back (restoring)", "GB/s", False),
]
METRICS_BY_NAME = {m.name: m for m in METRICS}


def report(framework: str, name: str, value: float, samples: list[float] | None = None, **extra) -> None:
    record = {"framework": framework, "metric": name, "value": round(value, 4),
              "unit": METRICS_BY_NAME[name].unit}
    if samples is not None:
        record["samples"] = [round(s, 4) for s in samples]
    record.update(extra)
    emit(record)


def shm_used_bytes() -> int:
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def nbytes(a) -> int:
    return int(a.nbytes)


def measure_put_get(fw, name: str, size: int, runs: int, label: str) -> None:
    import numpy as np

    array = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    puts, gets = [], []
    for _ in range(runs):
        start = time.perf_counter()
        ref = fw.put(array)
        puts.append(time.perf_counter() - start)
        start = time.perf_counter()
        value = fw.get(ref)
        gets.append(time.perf_counter() - start)
        if value.nbytes != size or value[size // 2] != array[size // 2]:
            raise AssertionError("get() returned a different array")
        del value, ref
    gbps = [size / t / 1e9 for t in puts]
    report(name, f"put_{label}_gbps", median(gbps), gbps)
    if label == "100mib":
        report(name, "put_100mib_ms", median(puts) * 1e3, [t * 1e3 for t in puts])
    report(name, f"get_{label}_ms", median(gets) * 1e3, [t * 1e3 for t in gets])


def measure_tasks(fw, name: str, runs: int) -> None:
    import numpy as np

    array = np.ones(100 * MIB, dtype=np.uint8)
    ref = fw.put(array)
    task = fw.remote(nbytes)
    fw.get([task.remote(ref) for _ in range(4)])  # warm the workers
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fw.get(task.remote(ref))
        times.append(time.perf_counter() - start)
    report(name, "task_arg_100mib_ms", median(times) * 1e3, [t * 1e3 for t in times])
    tens, grew = [], []
    for _ in range(max(3, runs // 4)):
        before = shm_used_bytes()
        start = time.perf_counter()
        sizes = fw.get([task.remote(ref) for _ in range(10)])
        tens.append(time.perf_counter() - start)
        grew.append(max(0, shm_used_bytes() - before))
        assert sizes == [100 * MIB] * 10
    report(name, "ten_tasks_100mib_ms", median(tens) * 1e3, [t * 1e3 for t in tens])
    # /dev/shm growth in units of the object: 0 means every task read the one stored copy
    report(name, "ten_tasks_extra_copies", round(median(grew) / (100 * MIB), 2), [g / MIB for g in grew])


def measure_loop(fw, name: str, iterations: int) -> None:
    import numpy as np

    array = np.random.default_rng(1).integers(0, 255, 100 * MIB, dtype=np.uint8)
    base = shm_used_bytes()
    peak = 0
    times = []
    for i in range(iterations):
        start = time.perf_counter()
        ref = fw.put(array)
        times.append(time.perf_counter() - start)
        del ref
        if i % 10 == 0:
            peak = max(peak, shm_used_bytes() - base)
    report(name, "loop_put_ms", median(times) * 1e3, iterations=iterations,
           first_last_ms=[round(times[0] * 1e3, 2), round(times[-1] * 1e3, 2)])
    report(name, "loop_peak_shm_mib", peak / MIB, iterations=iterations)


def measure_spill(fw, name: str, num_cpus: int) -> None:
    import numpy as np

    fw.shutdown()
    fw.init(num_cpus=num_cpus, object_store_memory=SPILL_STORE_BYTES)
    blocks = [np.random.default_rng(i).integers(0, 255, SPILL_OBJECT_BYTES, dtype=np.uint8)
              for i in range(4)]
    start = time.perf_counter()
    refs = [fw.put(blocks[i % 4]) for i in range(SPILL_OBJECTS)]
    put_s = time.perf_counter() - start
    total = SPILL_OBJECT_BYTES * SPILL_OBJECTS
    report(name, "spill_put_gbps", total / put_s / 1e9, seconds=round(put_s, 3))
    start = time.perf_counter()
    for i, ref in enumerate(refs):  # oldest first: each was spilled, and each restore spills another
        value = fw.get(ref)
        if value[12345] != blocks[i % 4][12345] or value[-1] != blocks[i % 4][-1]:
            raise AssertionError("a restored object differs")
        del value
    get_s = time.perf_counter() - start
    report(name, "restore_gbps", total / get_s / 1e9, seconds=round(get_s, 3))
    del refs




def run_worker(module_name: str, num_cpus: int, quick: bool, loop: int) -> None:
    fw = importlib.import_module(module_name)
    emit({"framework": module_name, "metric": "meta", "version": getattr(fw, "__version__", "?"),
          "python": sys.version.split()[0], "num_cpus": num_cpus, "quick": quick,
          "loadavg_1m": os.getloadavg()[0]})
    fw.init(num_cpus=num_cpus)
    with section(module_name, "put_get"):
        measure_put_get(fw, module_name, MIB, 50 if quick else 300, "1mib")
        measure_put_get(fw, module_name, 100 * MIB, 5 if quick else 21, "100mib")
        measure_put_get(fw, module_name, 1024 * MIB, 2 if quick else 5, "1gib")
    with section(module_name, "tasks"):
        measure_tasks(fw, module_name, 5 if quick else 21)
    with section(module_name, "loop"):
        measure_loop(fw, module_name, loop)
    with section(module_name, "spill"):
        measure_spill(fw, module_name, num_cpus)
    fw.shutdown()


def run_framework(module_name: str, python: str, args) -> dict[str, float]:
    cmd = [python, os.path.abspath(__file__), "--worker", module_name, "--num-cpus", str(args.num_cpus),
           "--loop", str(args.loop)]
    if args.quick:
        cmd.append("--quick")
    return collect_worker_metrics(module_name, cmd, METRICS_BY_NAME, args.timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON)
                        else None)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--loop", type=int, default=None, help="put+drop iterations (default 1000; 50 quick)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per framework")
    parser.add_argument("--worker", metavar="MODULE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop is None:
        args.loop = 50 if args.quick else 1000
    if args.worker:
        run_worker(args.worker, args.num_cpus, args.quick, args.loop)
        return 0
    runs = [("raylite", sys.executable)]
    if args.ray_python and not args.no_ray and shutil.which(args.ray_python):
        runs.append(("ray", args.ray_python))
    results = {}
    started = time.perf_counter()
    for module_name, python in runs:
        results[module_name] = run_framework(module_name, python, args)
    with contextlib.suppress(BrokenPipeError):
        print(f"\nObject store benchmark, num_cpus={args.num_cpus}, {os.cpu_count()} cores, "
              f"{time.perf_counter() - started:.0f} s in all, load {os.getloadavg()[0]:.1f}.\n",
              file=sys.stderr)
        print(render_table(METRICS, results, [name for name, _ in runs]), file=sys.stderr)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
