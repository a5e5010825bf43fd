"""Cluster benchmark: cross-node object bandwidth and node-death detection, raylite and Ray side by side.

    sudo python bench/cluster.py              # raylite, and Ray from /opt/rayvenv when present
    sudo python bench/cluster.py --no-ray     # raylite only
    python bench/cluster.py --loopback        # no root: raylite nodes on loopback (no cut link)

Each framework gets its own hosts made with ../shared/tools/netns-hosts (separate network
stacks joined by a bridge: real TCP between hosts): a head on host 1 with 1 CPU, workers on
hosts 2 and 3, each started with the framework's own `start` command. A driver on host 1
measures, with the same code for both frameworks (`import <framework> as ray`):
- transfer: `get()` on host 1 of a fresh 50 MB / 100 MB numpy array made by a task on
  host 2 (the pull across hosts plus the zero-copy read), median of 3, in GB/s;
- death detection: seconds from the fault until `nodes()` shows host 2 dead after every
  process of it is killed (`netns-hosts kill`), and host 3 dead after its link is cut
  (`netns-hosts cut`; capped at --cut-limit-s);
- lineage: seconds from killing host 4, which holds the only copy of a 20 MB task result
  (`max_retries=3`), until `get()` on host 1 returns it rebuilt by re-running the task.
JSON lines go to stdout; a Markdown table with the issue's targets goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Metric, emit, render_table  # noqa: E402  (this folder is not a package)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = "/work/shared/tools/netns-hosts"
DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"

METRICS = [
    Metric("transfer_100mb_gbps", "cross-node get() of 100 MB", "GB/s", False, 1.0),
    Metric("transfer_50mb_gbps", "cross-node get() of 50 MB", "GB/s", False),
    Metric("death_killed_s", "node death detected, processes killed", "s", True, 3.0),
    Metric("death_cut_s", "node death detected, link cut", "s", True, 10.0),
    Metric("lineage_rebuild_s", "lost 20 MB result rebuilt (host killed -> get)", "s", True),
]

TRANSFER = """
import json, statistics, time
import numpy as np
import {mod} as ray
ray.init(address="{address}")
@ray.remote(resources={{"h2": 1}})
def make(i, n):
    return np.full(n, i % 251, dtype=np.uint8)
out = {{}}
for mb in (50, 100):
    times = []
    for i in range(3):
        n = mb * 1024 * 1024
        ref = make.remote(i, n)
        ray.wait([ref], fetch_local=False)
        t = time.perf_counter()
        a = ray.get(ref)
        times.append(time.perf_counter() - t)
        assert a.nbytes == n and a[0] == i % 251 and a[-1] == i % 251
        del a, ref
    out["transfer_%dmb_gbps" % mb] = n / statistics.median(times) / 1e9
print(json.dumps(out), flush=True)
"""

DEATH = """
import json, time
import {mod} as ray
ray.init(address="{address}")
victim = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == "{victim_ip}"][0]
print(json.dumps({{"ready": 1}}), flush=True)
t0 = float(input())
alive = True
while alive and time.time() - t0 < {limit_s}:
    alive = any(n["NodeID"] == victim and n["Alive"] for n in ray.nodes())
    time.sleep(0.05)
print(json.dumps({{"detect_s": time.time() - t0, "detected": not alive}}), flush=True)
"""

LINEAGE = """
import json, time
import numpy as np
import {mod} as ray
from {mod}.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="{address}")
victim = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == "{victim_ip}"][0]
@ray.remote(max_retries=3)
def make(n):
    return np.full(n, 7, dtype=np.uint8)
ref = make.options(scheduling_strategy=NodeAffinitySchedulingStrategy(victim, soft=True)).remote(20 << 20)
ray.wait([ref], fetch_local=False)
print(json.dumps({{"ready": 1}}), flush=True)
t0 = float(input())
a = ray.get(ref, timeout={limit_s})
print(json.dumps({{"rebuild_s": time.time() - t0, "ok": a.nbytes == 20 << 20 and int(a[-1]) == 7}}), flush=True)
"""

HOSTS = (1, 2, 3, 4)


class Hosts:
    """netns hosts PREFIX1..3 running one framework's cluster."""

    def __init__(self, framework: str, python: str, prefix: str) -> None:
        self.framework = framework
        self.python = python
        self.prefix = prefix
        self.base = tempfile.mkdtemp(prefix="rlb", dir="/tmp")
        self.ips: dict[int, str] = {}
        self.token = ""

    def __enter__(self) -> Hosts:
        out = subprocess.run([TOOL, "up", str(len(HOSTS)), "--prefix", self.prefix], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            name, ip = line.split()[:2]
            self.ips[int(name[len(self.prefix):])] = ip
        return self

    def __exit__(self, *exc) -> None:
        import glob

        subprocess.run([TOOL, "down", "--prefix", self.prefix], capture_output=True)
        for session in glob.glob(f"{self.base}/*/session_*"):  # stores of killed raylite nodes
            for path in glob.glob(f"/dev/shm/raylite_{os.path.basename(session)}_*"):
                shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def address(self) -> str:
        return f"{self.ips[1]}:6379"

    def env(self, i: int) -> list[str]:
        # Ray 2.60's token auth reads ~/.ray/auth_token, which every netns host shares with
        # the machine (and other clusters): turned off for the benchmark
        env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
               "RAYLITE_TEMP_DIR": f"{self.base}/h{i}"}
        if self.framework == "raylite":
            env["PYTHONPATH"] = REPO
            env["RAYLITE_ADDRESS"] = self.address
            if self.token:
                env["RAYLITE_TOKEN"] = self.token
        return ["env", "-u", "PYTHONPATH", *[f"{k}={v}" for k, v in env.items()]]

    def run(self, i: int, argv: list[str], timeout_s: float = 180) -> str:
        res = subprocess.run([TOOL, "exec", f"{self.prefix}{i}", "--", *self.env(i), *argv],
                             capture_output=True, text=True, timeout=timeout_s)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} on host {i} failed:\n{res.stdout}\n{res.stderr}")
        return res.stdout

    def start(self) -> None:
        for i in HOSTS:
            ip = self.ips[i]
            res = json.dumps({f"h{i}": 1})
            if self.framework == "raylite":
                cmd = [self.python, "-m", "raylite.cli", "start", f"--node-ip-address={ip}",
                       "--num-cpus=1", f"--resources={res}", "--object-store-memory=500000000"]
                cmd += ["--head", "--port=6379"] if i == 1 else [f"--address={self.address}"]
            else:
                ray = os.path.join(os.path.dirname(self.python), "ray")
                cmd = [ray, "start", f"--node-ip-address={ip}", "--num-cpus=1", f"--resources={res}",
                       "--object-store-memory=500000000", "--disable-usage-stats"]
                cmd += (["--head", "--port=6379", "--include-dashboard=false",
                         f"--temp-dir={self.base}/ray"] if i == 1 else [f"--address={self.address}"])
            self.run(i, cmd)
            if self.framework == "raylite" and i == 1:
                import glob

                self.token = open(glob.glob(f"{self.base}/h1/session_*/token")[0]).read()

    def driver(self, code: str) -> subprocess.Popen:
        return subprocess.Popen([TOOL, "exec", f"{self.prefix}1", "--", *self.env(1), self.python, "-u",
                                 "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


def read_json(proc: subprocess.Popen, key: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        with contextlib.suppress(ValueError):
            d = json.loads(line)
            if key in d:
                return d
    raise RuntimeError(f"the driver never reported {key!r}:\n{proc.stderr.read()[-3000:]}")


def detect(hosts: Hosts, victim: int, fault: list[str], limit_s: float) -> float | None:
    code = DEATH.format(mod=hosts.framework, address=hosts.address, victim_ip=hosts.ips[victim],
                        limit_s=limit_s)
    proc = hosts.driver(code)
    try:
        read_json(proc, "ready", 240)
        subprocess.run([TOOL, *fault, f"{hosts.prefix}{victim}"], check=True, capture_output=True)
        proc.stdin.write(f"{time.time()}\n")
        proc.stdin.flush()
        res = read_json(proc, "detect_s", limit_s + 60)
    finally:
        proc.kill()
    return res["detect_s"] if res["detected"] else None


def rebuild(hosts: Hosts, victim: int, limit_s: float) -> float | None:
    """Seconds from killing `victim` (holding a task result's only copy) until get() returns it."""
    code = LINEAGE.format(mod=hosts.framework, address=hosts.address, victim_ip=hosts.ips[victim],
                          limit_s=limit_s)
    proc = hosts.driver(code)
    try:
        read_json(proc, "ready", 240)
        subprocess.run([TOOL, "kill", f"{hosts.prefix}{victim}"], check=True, capture_output=True)
        proc.stdin.write(f"{time.time()}\n")
        proc.stdin.flush()
        res = read_json(proc, "rebuild_s", limit_s + 60)
    finally:
        proc.kill()
    return res["rebuild_s"] if res["ok"] else None


def measure_netns(framework: str, python: str, cut_limit_s: float) -> dict[str, float]:
    results: dict[str, float] = {}
    with Hosts(framework, python, "rlbr" if framework == "raylite" else "rlby") as hosts:
        hosts.start()
        proc = hosts.driver(TRANSFER.format(mod=framework, address=hosts.address))
        try:
            out, err = proc.communicate(timeout=600)
        finally:
            proc.kill()
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"{framework} transfer driver failed:\n{err[-3000:]}")
        results.update(json.loads(lines[-1]))
        try:
            rebuilt = rebuild(hosts, 4, 180)
        except Exception as e:  # noqa: BLE001  e.g. the object is reported lost: no figure
            emit({"framework": framework, "metric": "lineage_rebuild_s", "value": None, "note": str(e)[:300]})
            rebuilt = None
        if rebuilt is not None:
            results["lineage_rebuild_s"] = rebuilt
        killed = detect(hosts, 2, ["kill"], 120)
        cut = detect(hosts, 3, ["cut"], cut_limit_s)
        if killed is not None:
            results["death_killed_s"] = killed
        if cut is not None:
            results["death_cut_s"] = cut
        else:
            emit({"framework": framework, "metric": "death_cut_s", "value": None,
                  "note": f"not detected within {cut_limit_s:.0f} s"})
    for name, value in results.items():
        emit({"framework": framework, "metric": name, "value": round(value, 3), "mode": "netns"})
    return results


def measure_loopback() -> dict[str, float]:
    """No root: raylite head + worker on loopback; transfer and killed-node detection only."""
    import signal

    sys.path.insert(0, REPO)
    import raylite as ray
    from raylite._core import config as config_mod
    from raylite._core.cluster import cluster as C

    temp = tempfile.mkdtemp(prefix="rlb", dir="/tmp")
    cfg = config_mod.get_config().replace(temp_dir=temp)
    config_mod._CONFIG = cfg
    nodes = []
    results: dict[str, float] = {}
    try:
        nodes.append(C.start_node(cfg, head=True, port=0 or _free_port(), node_ip="127.0.0.1", num_cpus=1))
        nodes.append(C.start_node(cfg, head=False, address="auto", node_ip="127.0.0.1", num_cpus=1,
                                  resources={"h2": 1}))
        ray.init(address="auto")
        ns: dict = {}
        exec(TRANSFER.split("ray.init", 1)[1].split("\n", 1)[1], {"ray": ray, "np": __import__("numpy"),
                                                                 "json": json, "time": time,
                                                                 "statistics": __import__("statistics"),
                                                                 "print": lambda s, **k: ns.update(json.loads(s))})
        results.update(ns)
        victim = nodes[1].node_id
        t0 = time.time()
        os.killpg(nodes[1].pid, signal.SIGKILL)
        while any(n["NodeID"] == victim and n["Alive"] for n in ray.nodes()):
            time.sleep(0.02)
        results["death_killed_s"] = time.time() - t0
    finally:
        ray.shutdown()
        C.stop_nodes(cfg, grace_s=5)
        for n in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(n.pid, signal.SIGKILL)
            for path in __import__("glob").glob(f"/dev/shm/raylite_{os.path.basename(n.session_dir)}_*"):
                shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)
    for name, value in results.items():
        emit({"framework": "raylite", "metric": name, "value": round(value, 3), "mode": "loopback"})
    return results


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def netns_available() -> bool:
    return os.geteuid() == 0 and os.path.exists(TOOL) and \
        subprocess.run([TOOL, "check"], capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON)
                        else None)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--only-ray", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loopback", action="store_true", help="raylite on loopback (no root needed)")
    parser.add_argument("--cut-limit-s", type=float, default=90.0)
    args = parser.parse_args(argv)
    if args.loopback or not netns_available():
        results = {"raylite": measure_loopback()}
        print(render_table(METRICS, results, ["raylite"]), file=sys.stderr)
        return 0
    runs = [] if args.only_ray else [("raylite", sys.executable)]
    if args.ray_python and not args.no_ray:
        runs.append(("ray", args.ray_python))
    results = {}
    for framework, python in runs:
        try:
            results[framework] = measure_netns(framework, python, args.cut_limit_s)
        except Exception as e:  # noqa: BLE001  report and go on with the other framework
            print(f"bench: {framework} failed: {e}", file=sys.stderr)
            emit({"framework": framework, "metric": "error", "error": str(e)[:500]})
            results[framework] = {}
    print(f"\nCluster benchmark on netns hosts, {os.cpu_count()} cores.\n", file=sys.stderr)
    print(render_table(METRICS, results, [f for f, _ in runs]), file=sys.stderr)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
