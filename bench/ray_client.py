"""Small calls and large objects through Ray Client (ray://) against a direct driver, for raylite
and, when its virtualenv is there, Ray 2.60, side by side in one run.

    sudo python bench/ray_client.py                  # raylite and Ray (/opt/rayvenv), both modes
    sudo python bench/ray_client.py --no-ray         # raylite only
    python bench/ray_client.py --ray-python PATH     # another Ray virtualenv

Each framework's head runs in a network-namespace host of its own (../shared/tools/netns-hosts;
root only), so stopping it (`netns-hosts down`) touches no other cluster on the machine -- `ray
stop` would stop every Ray cluster of the user. The head is started by the framework's CLI with
2 CPUs and its Ray Client server on 10001; each driver is a fresh interpreter on the head's host:
`init("HEAD:6379")` (direct: attached to the head's node) or `init("ray://HEAD:10001")`.

Metrics per driver (medians of sequential calls unless named otherwise):
    init_s           init() until the first task could be submitted
    task_rt_us       ray.get(f.remote()) of a no-op task
    actor_rt_us      ray.get(a.m.remote()) on an existing actor
    put_get_1k_us    ray.get(ray.put(1 KiB))
    tasks_per_s      1,000 no-op tasks submitted, then one get of all
    put_100mb_s      ray.put of a 100 MB numpy array
    get_100mb_s      ray.get of it back
Ray's auth token is off (RAY_AUTH_MODE=disabled: its token file is shared by every host); raylite's
is on, as always. Results: JSON lines on stdout, a Markdown table on stderr at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402  (this folder is not a package)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.environ.get("NETNS_HOSTS", "/work/shared/tools/netns-hosts")
PREFIX = "clientb"

DRIVER = r"""
import json, statistics, sys, time
import numpy as np
ray = __import__(sys.argv[1])
t0 = time.perf_counter()
ray.init(sys.argv[2])

@ray.remote
def f(x=None):
    return x

@ray.remote
class A:
    def m(self, x=None):
        return x

ray.get(f.remote())
out = {"init_s": time.perf_counter() - t0}

def med_us(fn, n=300):
    for _ in range(20):
        fn()
    times = []
    for _ in range(n):
        s = time.perf_counter()
        fn()
        times.append(time.perf_counter() - s)
    return statistics.median(times) * 1e6

out["task_rt_us"] = med_us(lambda: ray.get(f.remote()))
a = A.remote()
out["actor_rt_us"] = med_us(lambda: ray.get(a.m.remote()))
small = b"x" * 1024
out["put_get_1k_us"] = med_us(lambda: ray.get(ray.put(small)))
rates = []
for _ in range(3):
    s = time.perf_counter()
    ray.get([f.remote() for _ in range(1000)])
    rates.append(1000 / (time.perf_counter() - s))
out["tasks_per_s"] = max(rates)
arr = np.ones(25_000_000, dtype=np.float32)
puts, gets = [], []
for _ in range(3):
    s = time.perf_counter()
    ref = ray.put(arr)
    puts.append(time.perf_counter() - s)
    s = time.perf_counter()
    back = ray.get(ref)
    gets.append(time.perf_counter() - s)
    assert back.shape == arr.shape
    del ref, back
out["put_100mb_s"] = min(puts)
out["get_100mb_s"] = min(gets)
ray.shutdown()
print("RESULT " + json.dumps(out), flush=True)
"""

METRICS = ["init_s", "task_rt_us", "actor_rt_us", "put_get_1k_us", "tasks_per_s", "put_100mb_s", "get_100mb_s"]


def _run(argv: list[str], timeout_s: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:8])} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def run_framework(name: str, python: str, base: str) -> dict[str, dict]:
    """Start a head in a host of its own, run the direct and the ray:// driver; stop it all."""
    prefix = PREFIX + ("r" if name == "ray" else "l")  # a host per framework, in turn
    ip = _run([TOOL, "up", "1", "--prefix", prefix]).stdout.split()[1]
    host = f"{prefix}1"
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAYLITE_TEMP_DIR": f"{base}/{name}"}
    if name == "raylite":
        env["PYTHONPATH"] = REPO
    prefix_cmd = [TOOL, "exec", host, "--", "env", "-u", "PYTHONPATH", *[f"{k}={v}" for k, v in env.items()]]
    results: dict[str, dict] = {}
    try:
        if name == "raylite":
            _run([*prefix_cmd, python, "-m", "raylite.cli", "start", "--head", f"--node-ip-address={ip}",
                  "--port=6379", "--num-cpus=2", "--ray-client-server-port=10001"])
            token = open(glob.glob(f"{base}/{name}/session_*/token")[0]).read().strip()
            prefix_cmd.append(f"RAYLITE_TOKEN={token}")
        else:
            ray = os.path.join(os.path.dirname(python), "ray")
            _run([*prefix_cmd, ray, "start", "--head", f"--node-ip-address={ip}", "--port=6379", "--num-cpus=2",
                  "--ray-client-server-port=10001", "--include-dashboard=false", "--disable-usage-stats",
                  f"--temp-dir={base}/ray-tmp"])
        for mode, address in (("direct", f"{ip}:6379"), ("ray://", f"ray://{ip}:10001")):
            res = _run([*prefix_cmd, python, "-c", DRIVER, name, address], check=False)
            line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(f"{name} {mode} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}", file=sys.stderr)
                continue
            results[mode] = json.loads(line[-1][len("RESULT "):])
            emit({"framework": name, "mode": mode, **results[mode]})
    finally:
        subprocess.run([TOOL, "down", "--prefix", prefix], capture_output=True)
        for path in glob.glob("/dev/shm/raylite_*"):
            if any(os.path.basename(s) in path for s in glob.glob(f"{base}/{name}/session_*")):
                shutil.rmtree(path, ignore_errors=True)
    return results


def table(all_results: dict[str, dict[str, dict]]) -> str:
    cols = [(fw, mode) for fw in all_results for mode in ("direct", "ray://") if mode in all_results[fw]]
    lines = ["| metric | " + " | ".join(f"{fw} {mode}" for fw, mode in cols) + " |",
             "| --- |" + " ---: |" * len(cols)]
    for m in METRICS:
        cells = []
        for fw, mode in cols:
            v = all_results[fw][mode].get(m)
            cells.append("" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3f}"))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--ray-python", default=os.path.join(os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv"),
                                                        "bin", "python"))
    args = p.parse_args()
    if os.geteuid() != 0 or subprocess.run([TOOL, "check"], capture_output=True).returncode != 0:
        sys.exit("bench/ray_client.py needs root and network namespaces (netns-hosts check failed)")
    base = tempfile.mkdtemp(prefix="rlcb", dir="/tmp")
    results: dict[str, dict[str, dict]] = {}
    try:
        results["raylite"] = run_framework("raylite", sys.executable, base)
        if not args.no_ray and os.path.exists(args.ray_python):
            results["ray"] = run_framework("ray", args.ray_python, base)
    finally:
        with contextlib.suppress(Exception):
            shutil.rmtree(base, ignore_errors=True)
    print(table(results), file=sys.stderr)


if __name__ == "__main__":
    main()
