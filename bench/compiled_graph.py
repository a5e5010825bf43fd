"""Compiled graphs vs plain DAG execution, raylite and Ray side by side, in one run.

    python bench/compiled_graph.py                    # raylite, and Ray from /opt/rayvenv
    python bench/compiled_graph.py --no-ray --quick   # raylite only, fewer repetitions

Two DAGs of actor calls, each run both ways on the same actors:
  echo   one actor echoing a short string (Ray's compiled-graph quickstart)
  chain  actor a -> actor b, each adding 1 to an integer
and two measures per DAG and way:
  latency_us      one `get(dag.execute(x))` at a time (median over the samples)
  pipelined_us    50 executions with up to 8 in flight: time per execution (median of rounds)

Each framework is measured by this same script in worker mode under its own interpreter;
rounds alternate between raylite and Ray so machine load hits both alike. Prints JSON lines,
then a table on stderr with the load average. Both get `init(num_cpus=2)`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PIPELINE = 50
WINDOW = 8


def _worker(framework: str, samples: int) -> None:
    if framework == "ray":
        import ray
        from ray.dag import InputNode
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import raylite as ray
        from raylite.dag import InputNode
        ray.init(num_cpus=2)

    @ray.remote
    class Actor:
        def echo(self, x):
            return x

        def inc(self, x):
            return x + 1

    a, b = Actor.remote(), Actor.remote()
    with InputNode() as inp:
        echo = a.echo.bind(inp)
    with InputNode() as inp:
        chain = b.inc.bind(a.inc.bind(inp))

    def measure(name: str, dag, arg) -> None:
        for mode in ("execute", "compiled"):
            runner = dag.experimental_compile() if mode == "compiled" else dag
            for _ in range(20):  # warm up
                ray.get(runner.execute(arg))
            lat = []
            for _ in range(samples):
                t = time.perf_counter()
                ray.get(runner.execute(arg))
                lat.append(time.perf_counter() - t)
            pipe = []
            for _ in range(max(3, samples // 100)):
                t = time.perf_counter()
                window: list = []
                for _ in range(PIPELINE):  # at most WINDOW in flight (compiled graphs allow 10)
                    window.append(runner.execute(arg))
                    if len(window) == WINDOW:
                        ray.get(window.pop(0))
                for ref in window:
                    ray.get(ref)
                pipe.append((time.perf_counter() - t) / PIPELINE)
            if mode == "compiled":
                runner.teardown()
            for metric, values in (("latency_us", lat), ("pipelined_us", pipe)):
                print(json.dumps({"framework": framework, "dag": name, "mode": mode, "metric": metric,
                                  "values_us": [v * 1e6 for v in values]}), flush=True)

    measure("echo", echo, "hello")
    measure("chain", chain, 1)
    ray.shutdown()


def _run_worker(python: str, framework: str, samples: int) -> list[dict]:
    env = dict(os.environ)
    if framework == "ray":
        env.pop("PYTHONPATH", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run([python, os.path.abspath(__file__), "--worker", framework, "--samples",
                           str(samples)], capture_output=True, text=True, env=env, timeout=900)
    records = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    if proc.returncode != 0 or not records:
        sys.stderr.write(f"{framework} worker failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}\n")
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=["raylite", "ray"])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ray-python", default="/opt/rayvenv/bin/python")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.samples)
        return 0
    samples, rounds = (100, 1) if args.quick else (args.samples, args.rounds)
    frameworks = [("raylite", sys.executable)]
    if not args.no_ray and os.path.exists(args.ray_python):
        frameworks.append(("ray", args.ray_python))
    merged: dict[tuple, list[float]] = {}
    for _ in range(rounds):
        for name, python in frameworks:
            for rec in _run_worker(python, name, samples):
                print(json.dumps(rec), flush=True)
                key = (rec["dag"], rec["metric"], rec["framework"], rec["mode"])
                merged.setdefault(key, []).extend(rec["values_us"])
    load = os.getloadavg()
    out = [f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; medians in microseconds "
           f"({samples} samples x {rounds} rounds)", "",
           "| dag | measure | raylite .execute() | raylite compiled | Ray .execute() | Ray compiled |",
           "|---|---|---|---|---|---|"]
    for dag in ("echo", "chain"):
        for metric in ("latency_us", "pipelined_us"):
            cells = []
            for fw in ("raylite", "ray"):
                for mode in ("execute", "compiled"):
                    values = merged.get((dag, metric, fw, mode))
                    cells.append(f"{statistics.median(values):.0f}" if values else "-")
            out.append(f"| {dag} | {metric} | " + " | ".join(cells) + " |")
    sys.stderr.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
