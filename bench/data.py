"""Data benchmark: a streaming pipeline and a groupby; raylite, plain pyarrow/pandas, and Ray.

    python bench/data.py                       # ~1 GB of Parquet; raylite, pyarrow, and Ray if found
    python bench/data.py --ray-python PATH     # Ray from another interpreter (needs ray[data])
    python bench/data.py --gb 0.2 --no-ray     # smaller, raylite and pyarrow only

Pipeline (issue 6): ``read_parquet -> map_batches(numpy transform) -> filter -> iter_batches``
over generated Parquet (16 float32 features, an int64 id and an int32 key per row). The same
function runs on raylite and on Ray (only the module differs); the baseline does the same
steps with plain pyarrow in one process. The filter comes in three forms (issue 14): the
string ``filter(expr="score > 0")`` ("stream"), the expression ``filter(expr=col("score") > 0)``
("expr"), and the per-row function ``filter(lambda r: r["score"] > 0)`` ("rows"); plain
pyarrow runs its vectorised filter for all three. ``--rows-gb`` runs the row pipeline on a
smaller data set (Ray's per-row path takes minutes at 1 GB on a loaded 2-core machine). Groupby: ``read_parquet(columns=[key, f0])
.groupby("key").mean("f0")`` against ``pandas.read_parquet(...).groupby("key").f0.mean()``.

Each framework runs in its own fresh interpreter (``--worker NAME``), so peak memory is that
run's process tree alone: the sum of PSS over the driver and every process below it, plus
raylite's shared-memory object files that no process maps at that moment (pages in a
``/dev/shm`` store directory created by the run, minus those already counted in some
process's PSS). Ray's object store is mapped by its processes, so PSS covers it.
Clusters get ``init(num_cpus=2)``; everything else is each framework's default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MIB, Metric, descendants, emit, render_table, tree_memory  # noqa: E402

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
NUM_FEATURES = 16
ROW_BYTES = 8 + 4 + 4 * NUM_FEATURES
BATCH = 8192
SHM = "/dev/shm"

METRICS = [
    Metric("stream_s", "stream: read -> map_batches -> filter -> iter_batches", "s", True),
    Metric("stream_rows_per_s", "stream throughput (input rows)", "rows/s", False),
    Metric("stream_vs_pyarrow", "stream time / plain pyarrow's", "x", True, 2.0),
    Metric("stream_peak_mib", "stream peak memory, process tree", "MiB", True, 1536),
    Metric("expr_s", "expr: ... -> filter(expr=col('score') > 0) -> iter_batches", "s", True),
    Metric("expr_vs_pyarrow", "expr time / plain pyarrow's", "x", True, 1.3),
    Metric("expr_cpu_s", "expr: CPU time of the whole process tree", "s", True),
    Metric("expr_cpu_vs_pyarrow", "expr CPU time / plain pyarrow's", "x", True, 1.3),
    Metric("rows_s", "rows: ... -> filter(lambda r: r['score'] > 0) -> iter_batches (--rows-gb data)", "s",
           True),
    Metric("rows_vs_pyarrow", "rows time / plain pyarrow's (vectorised)", "x", True),
    Metric("rows_cpu_s", "rows: CPU time of the whole process tree", "s", True),
    Metric("ray_rows_vs_this", "Ray's rows time / this one's (speed-up over Ray)", "x", False, 3.0),
    Metric("ray_rows_cpu_vs_this", "Ray's rows CPU time / this one's", "x", False, 3.0),
    Metric("groupby_s", "groupby(key).mean(f0)", "s", True),
    Metric("groupby_vs_pandas", "groupby time / pandas'", "x", True, 2.0),
    Metric("groupby_peak_mib", "groupby peak memory, process tree", "MiB", True),
    Metric("init_s", "init(num_cpus=2)", "s", True),
]


# ------------------------------------------------------------------------------ the data


def generate(path: str, gb: float, files: int = 16) -> int:
    """Write ~``gb`` GB of Parquet into ``path`` once; returns the row count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows_total = int(gb * 1e9 / ROW_BYTES)
    per_file = rows_total // files
    marker = os.path.join(path, "_DONE")
    if os.path.exists(marker):
        return int(open(marker).read())
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(files):
        cols = {"id": np.arange(i * per_file, (i + 1) * per_file, dtype=np.int64),
                "key": rng.integers(0, 1000, per_file, dtype=np.int32)}
        for f in range(NUM_FEATURES):
            cols[f"f{f}"] = rng.standard_normal(per_file, dtype=np.float32)
        pq.write_table(pa.table(cols), os.path.join(path, f"part-{i:03d}.parquet"), row_group_size=128 * 1024)
    with open(marker, "w") as f:
        f.write(str(per_file * files))
    return per_file * files


def add_score(batch):
    """The pipeline's numpy transform: a weighted sum of the features."""
    import numpy as np

    x = np.stack([batch[f"f{i}"] for i in range(NUM_FEATURES)], axis=1)
    weights = np.linspace(-1.0, 1.0, NUM_FEATURES, dtype=np.float32)
    batch["score"] = x @ weights
    return batch


# ------------------------------------------------------------------------------ memory


class PeakMemory:
    """Samples the process tree every ``interval_s``; ``peak_bytes`` is the largest total seen."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._shm_before = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self.sample())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, self.sample())

    def _store_dirs(self) -> list[str]:
        if not os.path.isdir(SHM):
            return []
        return [os.path.join(SHM, d) for d in os.listdir(SHM) if d not in self._shm_before]

    def sample(self) -> int:
        pids = descendants(os.getpid())
        mem = tree_memory(os.getpid())
        total = mem.pss_bytes if mem.pss_bytes is not None else mem.rss_bytes
        dirs = self._store_dirs()
        if dirs:
            total += _file_bytes(dirs) - _mapped_pss(pids, dirs)
        return total


def _file_bytes(dirs: list[str]) -> int:
    size = 0
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in files:
                try:
                    size += os.stat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    pass
    return size


def _mapped_pss(pids: list[int], dirs: list[str]) -> int:
    """PSS of mappings of files under ``dirs`` (already inside the tree's PSS)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps") as f:
                inside = False
                for line in f:
                    parts = line.split()
                    if parts and not parts[0].endswith(":"):  # a mapping's header line
                        inside = len(parts) >= 6 and any(parts[5].startswith(d) for d in dirs)
                    elif inside and line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def tree_cpu_s() -> float:
    """User + system CPU seconds of this process and every live process below it.

    Why: on a shared, loaded machine wall time mostly measures the neighbours; CPU time
    of the process tree (driver, daemons, workers) is what a pipeline itself costs.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def timed(fn, *args):
    """(result, wall seconds, process-tree CPU seconds) of ``fn(*args)``."""
    cpu0, start = tree_cpu_s(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start, tree_cpu_s() - cpu0


# ------------------------------------------------------------------------------ workers


def _pyarrow_stream(path: str) -> tuple[int, int]:
    """The pipeline in plain pyarrow, one process: (rows in, rows out)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    rows_in = rows_out = 0
    for file in files:
        for rb in pq.ParquetFile(file).iter_batches(batch_size=BATCH):
            rows_in += rb.num_rows
            batch = {name: rb.column(i).to_numpy() for i, name in enumerate(rb.schema.names)}
            table = pa.table(add_score(batch))
            table = table.filter(pc.greater(table["score"], 0))
            for offset in range(0, table.num_rows, BATCH):
                out = {n: c.to_numpy() for n, c in zip(table.column_names, table.slice(offset, BATCH).columns)}
                rows_out += len(out["id"])
    return rows_in, rows_out


def run_pyarrow(path: str, rows_path: str) -> dict:
    import pandas as pd

    with PeakMemory() as mem:
        (rows_in, rows_out), stream_s, stream_cpu_s = timed(_pyarrow_stream, path)
    _, rows_s, rows_cpu_s = timed(_pyarrow_stream, rows_path)
    with PeakMemory() as gmem:
        start = time.perf_counter()
        result = pd.read_parquet(path, columns=["key", "f0"]).groupby("key")["f0"].mean()
        groupby_s = time.perf_counter() - start
    return {"stream_s": stream_s, "stream_rows_per_s": rows_in / stream_s, "stream_peak_mib": mem.peak_bytes / MIB,
            "rows_out": rows_out, "groupby_s": groupby_s, "groupby_peak_mib": gmem.peak_bytes / MIB,
            "groups": len(result), "expr_s": stream_s, "rows_s": rows_s, "expr_cpu_s": stream_cpu_s,
            "rows_cpu_s": rows_cpu_s}


def _cluster_stream(rd: object, path: str, how: str) -> int:
    """The pipeline on raylite or Ray with the filter in form ``how``; returns rows out."""
    ds = rd.read_parquet(path).map_batches(add_score, batch_size=BATCH)
    if how == "string":
        ds = ds.filter(expr="score > 0")
    elif how == "expr":
        col = __import__(f"{rd.__name__}.expressions", fromlist=["col"]).col
        ds = ds.filter(expr=col("score") > 0)
    else:
        ds = ds.filter(lambda r: r["score"] > 0)
    rows_out = 0
    for batch in ds.iter_batches(batch_size=BATCH):
        rows_out += len(batch["id"])
    return rows_out


def run_cluster(name: str, path: str, rows_path: str) -> dict:
    start = time.perf_counter()
    ray = __import__(name)
    ray.init(num_cpus=2)
    init_s = time.perf_counter() - start
    rd = __import__(f"{name}.data", fromlist=["data"])
    rd.DataContext.get_current().enable_progress_bars = False
    rd.range(10).map_batches(lambda b: b).take_all()  # warm the workers (imports) outside the timing
    with PeakMemory() as mem:
        start = time.perf_counter()
        rows_out = _cluster_stream(rd, path, "string")
        stream_s = time.perf_counter() - start
    expr_out, expr_s, expr_cpu_s = timed(_cluster_stream, rd, path, "expr")
    rows_fn_out, rows_s, rows_cpu_s = timed(_cluster_stream, rd, rows_path, "rows")
    assert expr_out == rows_out, (expr_out, rows_out)
    rows_in = int(open(os.path.join(path, "_DONE")).read())
    with PeakMemory() as gmem:
        start = time.perf_counter()
        result = rd.read_parquet(path, columns=["key", "f0"]).groupby("key").mean("f0").to_pandas()
        groupby_s = time.perf_counter() - start
    ray.shutdown()
    return {"stream_s": stream_s, "stream_rows_per_s": rows_in / stream_s, "stream_peak_mib": mem.peak_bytes / MIB,
            "rows_out": rows_out, "groupby_s": groupby_s, "groupby_peak_mib": gmem.peak_bytes / MIB,
            "groups": len(result), "init_s": init_s, "expr_s": expr_s, "rows_s": rows_s, "rows_fn_out": rows_fn_out,
            "expr_cpu_s": expr_cpu_s, "rows_cpu_s": rows_cpu_s}


def worker(name: str, path: str, rows_path: str, repeat: int = 1) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = [run_pyarrow(path, rows_path) if name == "pyarrow" else run_cluster(name, path, rows_path)
            for _ in range(max(1, repeat))]
    result = dict(runs[0])
    for key in ("stream_s", "expr_s", "rows_s", "groupby_s", "expr_cpu_s", "rows_cpu_s"):  # medians
        values = sorted(r[key] for r in runs)
        result[key] = values[len(values) // 2]
        result[f"{key}_all"] = [round(r[key], 3) for r in runs]
    emit({"framework": name, **result})


# ------------------------------------------------------------------------------ parent


def _spawn(python: str, name: str, path: str, rows_path: str, timeout_s: float, repeat: int) -> dict | None:
    env = dict(os.environ)
    if name != "raylite":
        env.pop("PYTHONPATH", None)
    proc = subprocess.run([python, os.path.abspath(__file__), "--worker", name, "--data-dir", path,
                           "--rows-data-dir", rows_path, "--repeat", str(repeat)],
                          capture_output=True, text=True, timeout=timeout_s, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    sys.stderr.write(f"[{name}] failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}\n")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="size of the generated Parquet data")
    parser.add_argument("--data-dir", default=None, help="where the Parquet files live (generated once)")
    parser.add_argument("--rows-gb", type=float, default=None,
                        help="size of the data for the per-row pipeline (default: --gb)")
    parser.add_argument("--rows-data-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON) else None)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--worker", choices=["raylite", "ray", "pyarrow"], help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=1, help="stream runs per framework (median reported)")
    parser.add_argument("--timeout-s", type=float, default=1800)
    args = parser.parse_args(argv)
    path = args.data_dir or os.path.join("/tmp", f"raylite-bench-data-{args.gb:g}gb")
    rows_gb = args.rows_gb if args.rows_gb is not None else args.gb
    rows_path = args.rows_data_dir or os.path.join("/tmp", f"raylite-bench-data-{rows_gb:g}gb")
    if args.worker:
        worker(args.worker, path, rows_path, args.repeat)
        return 0
    rows = generate(path, args.gb)
    row_rows = generate(rows_path, rows_gb)
    sys.stderr.write(f"data: {rows:,} rows in {path}; per-row pipeline: {row_rows:,} rows in {rows_path}\n")
    results: dict[str, dict] = {}
    runs = [("raylite", sys.executable), ("pyarrow", sys.executable)]
    if args.ray_python and not args.no_ray:
        runs.append(("ray", args.ray_python))
    for name, python in runs:
        record = _spawn(python, name, path, rows_path, args.timeout_s, args.repeat)
        if record is not None:
            results[name] = record
            emit(record)
    base = results.get("pyarrow")
    if base:
        for name, rec in results.items():
            if name != "pyarrow":
                rec["stream_vs_pyarrow"] = rec["stream_s"] / base["stream_s"]
                rec["groupby_vs_pandas"] = rec["groupby_s"] / base["groupby_s"]
                rec["expr_vs_pyarrow"] = rec["expr_s"] / base["expr_s"]
                rec["rows_vs_pyarrow"] = rec["rows_s"] / base["rows_s"]
                rec["expr_cpu_vs_pyarrow"] = rec["expr_cpu_s"] / base["expr_cpu_s"]
    if "ray" in results:
        for name, rec in results.items():
            if name != "pyarrow":
                rec["ray_rows_vs_this"] = results["ray"]["rows_s"] / rec["rows_s"]
                rec["ray_rows_cpu_vs_this"] = results["ray"]["rows_cpu_s"] / rec["rows_cpu_s"]
    frameworks = [n for n in ("raylite", "ray", "pyarrow") if n in results]
    sys.stderr.write(render_table(METRICS, results, frameworks) + "\n")
    return 0 if "raylite" in results else 1


if __name__ == "__main__":
    sys.exit(main())
