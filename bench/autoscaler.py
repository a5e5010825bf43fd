"""Autoscaler benchmark: how long demand takes to get a node, and an idle node to go, raylite and
Ray side by side, both through their `cluster_utils.AutoscalingCluster` on this machine.

    python bench/autoscaler.py              # raylite, and Ray from /opt/rayvenv when present
    python bench/autoscaler.py --no-ray     # raylite only

The same code runs for both (`import <framework> as ray`): a head with no CPUs and one worker
node type of 1 CPU (0..2 nodes, idle timeout 6 s); measured:
- scale_up_s: from submitting a 1-CPU task until its result is back (a node is launched, joins
  and runs it);
- second_task_s: a second task once the node is there (no launch);
- scale_down_s: from the result until the head lists no alive worker (idle timeout included).
JSON lines go to stdout; a Markdown table goes to stderr. Ray's side needs Ray's fake
multi-node provider config (`ray/autoscaler/_private/fake_multi_node/example.yaml`), which Ray's
pip wheel (2.60) does not ship: there the Ray column reads n/a and the error says why.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Metric, collect_worker_metrics, render_table  # noqa: E402  (not a package)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RAY_PYTHON = os.path.join(os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv"), "bin", "python")

METRICS = [
    Metric("scale_up_s", "task on a new node (launch + join + run)", "s", True),
    Metric("second_task_s", "task on the running node", "s", True),
    Metric("scale_down_s", "idle node gone (6 s timeout included)", "s", True),
]

WORKER = """
import json, time
import {mod} as ray
from {mod}.cluster_utils import AutoscalingCluster

def emit(metric, value):
    print(json.dumps({{"framework": "{mod}", "metric": metric, "value": value}}), flush=True)

cluster = AutoscalingCluster(head_resources={{"CPU": 0}},
                             worker_node_types={{"cpu_node": {{"resources": {{"CPU": 1, "object_store_memory": 10**8}},
                                                             "node_config": {{}}, "min_workers": 0, "max_workers": 2}}}},
                             idle_timeout_minutes=0.1)
cluster.start()
try:
    ray.init("auto")

    @ray.remote(num_cpus=1)
    def f():
        return 1

    t = time.perf_counter()
    ray.get(f.remote(), timeout=300)
    emit("scale_up_s", time.perf_counter() - t)
    t = time.perf_counter()
    ray.get(f.remote(), timeout=300)
    emit("second_task_s", time.perf_counter() - t)
    t = time.perf_counter()
    while time.perf_counter() - t < 300:
        workers = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
        if not workers:
            emit("scale_down_s", time.perf_counter() - t)
            break
        time.sleep(0.1)
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    parser.add_argument("--timeout-s", type=float, default=600)
    args = parser.parse_args()
    names = {m.name for m in METRICS}
    results = {"raylite": collect_worker_metrics(
        "raylite", [sys.executable, "-c", WORKER.format(mod="raylite")], names, args.timeout_s)}
    frameworks = ["raylite"]
    if not args.no_ray and os.path.exists(args.ray_python):
        results["ray"] = collect_worker_metrics("ray", [args.ray_python, "-c", WORKER.format(mod="ray")], names,
                                                args.timeout_s)
        frameworks.append("ray")
    print(render_table(METRICS, results, frameworks), file=sys.stderr)


if __name__ == "__main__":
    main()
