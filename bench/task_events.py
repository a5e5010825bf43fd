"""What recording task events costs: task and actor-call throughput with events on and off.

    python bench/task_events.py [--rounds 5]

Runs are interleaved (on, off, on, off, ...) in fresh interpreters so a loaded machine's
drift hits both sides alike; each run measures 5,000 no-op tasks and 5,000 actor calls
three times (bench/core.py's workload) and the medians are compared, along with the CPU
time the whole process tree spent per task (driver, node/head, workers), which a busy
machine disturbs less than throughput. Events off means
RAYLITE_TASK_EVENTS_ENABLED=0 (nothing recorded, nothing flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N = 5_000

WORKER = r"""
import json, time, psutil, raylite
def tree_cpu():
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times(); total += t.user + t.system
        except psutil.Error:
            pass
    return total
raylite.init(num_cpus=2, include_dashboard=False)
@raylite.remote
def noop():
    return None
@raylite.remote
class Counter:
    def __init__(self): self.n = 0
    def bump(self): self.n += 1; return self.n
raylite.get([noop.remote() for _ in range(500)])
tasks, calls = [], []
time.sleep(1.2); cpu0 = tree_cpu()
for _ in range(3):
    start = time.perf_counter(); raylite.get([noop.remote() for _ in range(__N__)])
    tasks.append(__N__ / (time.perf_counter() - start))
time.sleep(1.2); cpu_tasks = (tree_cpu() - cpu0) / (3 * __N__) * 1e6  # incl. the last flush
c = Counter.remote(); raylite.get([c.bump.remote() for _ in range(200)])
for _ in range(3):
    start = time.perf_counter(); raylite.get([c.bump.remote() for _ in range(__N__)])
    calls.append(__N__ / (time.perf_counter() - start))
print(json.dumps({"tasks": sorted(tasks)[1], "calls": sorted(calls)[1], "cpu_us_per_task": cpu_tasks}))
raylite.shutdown()
""".replace("__N__", str(N))


def run_once(enabled: bool) -> dict[str, float]:
    env = {**os.environ, "RAYLITE_TASK_EVENTS_ENABLED": "1" if enabled else "0"}
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(args.rounds):
        for enabled in (True, False) if i % 2 == 0 else (False, True):
            results[enabled].append(run_once(enabled))
            print(json.dumps({"round": i, "events": enabled, **results[enabled][-1]}), flush=True)
    for metric in ("tasks", "calls"):
        on = statistics.median(r[metric] for r in results[True])
        off = statistics.median(r[metric] for r in results[False])
        print(f"{metric + '/s':>16}  events on {on:8.0f}   off {off:8.0f}   cost {100 * (off - on) / off:+.1f}%",
              file=sys.stderr)
    on = statistics.median(r["cpu_us_per_task"] for r in results[True])
    off = statistics.median(r["cpu_us_per_task"] for r in results[False])
    print(f"{'CPU us/task':>16}  events on {on:8.0f}   off {off:8.0f}   cost {100 * (on - off) / off:+.1f}% "
          "(all processes; steadier than throughput on a loaded machine)", file=sys.stderr)
    print(f"load average {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M:%S')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
