"""Data writers benchmark: ``write_orc`` (and ``write_parquet`` beside it), raylite and Ray 2.60.

    python bench/data_writers.py                      # 2M rows, 3 runs each, Ray from /opt/rayvenv
    python bench/data_writers.py --rows 500000 --no-ray

The same program runs on both (only the module differs): ``range(n)`` with two derived
columns, repartitioned into 8 blocks and materialized, then written with each writer into a
fresh directory; the written files are read back with pyarrow to check the row count.
Each framework runs in its own interpreter with ``init(num_cpus=2)``; the figures are
medians over ``--runs`` writes in one cluster (the first, warm-up write is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(ray, n: int):
    def derive(batch):
        batch["x"] = batch["id"] * 0.5
        batch["k"] = batch["id"] % 97
        return batch

    return ray.data.range(n).map_batches(derive, batch_format="numpy").repartition(8).materialize()


def worker(name: str, rows: int, runs: int) -> None:
    """Time each writer in this interpreter and print one JSON line."""
    import pyarrow.dataset as pads
    import ray  # raylite through compat/ray, or Ray 2.60 in its own venv

    ray.init(num_cpus=2, include_dashboard=False) if name == "ray" else ray.init(num_cpus=2)
    ds = _rows(ray, rows)
    out: dict[str, float] = {}
    for writer, fmt in (("write_orc", "orc"), ("write_parquet", "parquet")):
        times = []
        for i in range(runs + 1):
            where = tempfile.mkdtemp(prefix=f"bench-{name}-{fmt}-")
            start = time.perf_counter()
            getattr(ds, writer)(where)
            elapsed = time.perf_counter() - start
            written = pads.dataset(where, format=fmt).count_rows()
            shutil.rmtree(where, ignore_errors=True)
            if written != rows:
                raise SystemExit(f"{name} {writer} wrote {written} rows, expected {rows}")
            if i:  # the first write warms the workers up
                times.append(elapsed)
        out[writer] = statistics.median(times)
    ray.shutdown()
    print(json.dumps(out))


def _spawn(python: str, name: str, rows: int, runs: int) -> dict[str, float] | None:
    env = dict(os.environ)
    if name == "raylite":
        env["PYTHONPATH"] = os.pathsep.join([REPO, os.path.join(REPO, "compat", "ray", "src"),
                                             env.get("PYTHONPATH", "")])
    proc = subprocess.run([python, __file__, "--worker", name, "--rows", str(rows), "--runs", str(runs)],
                          capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        print(f"{name} failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.rows, args.runs)
        return 0
    results = {"raylite": _spawn(sys.executable, "raylite", args.rows, args.runs)}
    if not args.no_ray and os.path.exists(args.ray_python):
        results["ray 2.60"] = _spawn(args.ray_python, "ray", args.rows, args.runs)
    print(f"{args.rows:,} rows in 8 blocks, median of {args.runs} writes (s)")
    print(f"{'writer':<16}" + "".join(f"{name:>12}" for name in results))
    for writer in ("write_orc", "write_parquet"):
        cells = "".join(f"{r[writer]:>12.3f}" if r else f"{'failed':>12}" for r in results.values())
        print(f"{writer:<16}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
