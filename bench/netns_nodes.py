"""25 and 50 real nodes joined to one head, raylite and Ray side by side (root only).

    sudo python bench/netns_nodes.py                    # 25 and 50 nodes, raylite then Ray
    sudo python bench/netns_nodes.py --nodes 25 --no-ray

Each framework gets N+1 hosts made with ../shared/tools/netns-hosts (own network stacks on
one bridge, real TCP): the head on host 1 (1 CPU) and one node of 1 CPU on each other host,
started one after the other with the framework's own `start` command. Measured:
- node_start_s: median seconds for one node's `start` command to return (the node serving);
  all_joined_s: from the first node start until the head lists all N+1 nodes alive;
- node_mib: median PSS of everything running on a node's host (daemons, their workers);
- head_idle_cpu_pct: CPU of every process on the head's host over 20 s, cluster idle;
- spread_s: a driver on the head's host runs 10,000 SPREAD tasks (num_cpus=1, each
  returns its node id); spread_nodes: how many nodes ran at least one.
JSON lines on stdout, a table on stderr. The machine is shared and small: run each case once,
and read the load average printed with it.
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402  (this folder is not a package)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = "/work/shared/tools/netns-hosts"
RAY_PYTHON = "/opt/rayvenv/bin/python"

SPREAD = """
import json, time
import {mod} as ray
ray.init(address="{address}")
@ray.remote(num_cpus=1)
def where():
    return ray.get_runtime_context().get_node_id()
ray.get([where.remote() for _ in range(10)])
time.sleep(2)  # the warm-up's leases are given back and every node's load report is fresh
t = time.perf_counter()
nodes = ray.get([where.options(scheduling_strategy="SPREAD").remote() for _ in range({tasks})])
print(json.dumps({{"spread_s": time.perf_counter() - t, "spread_nodes": len(set(nodes))}}), flush=True)
"""

ALIVE = """
import json
import {mod} as ray
ray.init(address="{address}")
print(json.dumps({{"alive": sum(1 for n in ray.nodes() if n["Alive"])}}), flush=True)
"""


class Hosts:
    def __init__(self, framework: str, n: int, prefix: str) -> None:
        self.framework = framework
        self.n = n
        self.prefix = prefix
        self.python = sys.executable if framework == "raylite" else RAY_PYTHON
        self.base = tempfile.mkdtemp(prefix="rlnn", dir="/tmp")
        self.ips: dict[int, str] = {}
        self.token = ""

    def __enter__(self) -> Hosts:
        out = subprocess.run([TOOL, "up", str(self.n + 1), "--prefix", self.prefix], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            name, ip = line.split()[:2]
            self.ips[int(name[len(self.prefix):])] = ip
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run([TOOL, "down", "--prefix", self.prefix], capture_output=True)
        for session in glob.glob(f"{self.base}/*/session_*"):
            for path in glob.glob(f"/dev/shm/raylite_{os.path.basename(session)}_*"):
                shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def address(self) -> str:
        return f"{self.ips[1]}:6379"

    def env(self, i: int) -> list[str]:
        env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
               "RAYLITE_TEMP_DIR": f"{self.base}/h{i}"}
        if self.framework == "raylite":
            env["PYTHONPATH"] = REPO
            if self.token:
                env["RAYLITE_TOKEN"] = self.token
        return ["env", "-u", "PYTHONPATH", *[f"{k}={v}" for k, v in env.items()]]

    def run(self, i: int, argv: list[str], timeout_s: float = 300) -> str:
        res = subprocess.run([TOOL, "exec", f"{self.prefix}{i}", "--", *self.env(i), *argv],
                             capture_output=True, text=True, timeout=timeout_s)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} on host {i} failed:\n{res.stdout}\n{res.stderr}")
        return res.stdout

    def start_cmd(self, i: int) -> list[str]:
        ip = self.ips[i]
        if self.framework == "raylite":
            cmd = [self.python, "-m", "raylite.cli", "start", f"--node-ip-address={ip}", "--num-cpus=1",
                   "--object-store-memory=100000000"]
            return cmd + (["--head", "--port=6379"] if i == 1 else [f"--address={self.address}"])
        ray = os.path.join(os.path.dirname(self.python), "ray")
        cmd = [ray, "start", f"--node-ip-address={ip}", "--num-cpus=1", "--object-store-memory=100000000",
               "--disable-usage-stats"]
        return cmd + (["--head", "--port=6379", "--include-dashboard=false", f"--temp-dir={self.base}/ray"]
                      if i == 1 else [f"--address={self.address}"])

    def start(self) -> dict:
        self.run(1, self.start_cmd(1))
        if self.framework == "raylite":
            self.token = open(glob.glob(f"{self.base}/h1/session_*/token")[0]).read()
        times = []
        t0 = time.monotonic()
        for i in range(2, self.n + 2):
            t = time.monotonic()
            self.run(i, self.start_cmd(i))
            times.append(time.monotonic() - t)
        deadline = time.monotonic() + 300
        while self.driver_json(ALIVE)["alive"] < self.n + 1:
            if time.monotonic() > deadline:
                raise RuntimeError("not every node joined within 300 s")
            time.sleep(1)
        times.sort()
        return {"node_start_s": times[len(times) // 2], "all_joined_s": time.monotonic() - t0}

    def driver_json(self, template: str, timeout_s: float = 600, **kw) -> dict:
        code = template.format(mod=self.framework, address=self.address, **kw)
        out = self.run(1, [self.python, "-c", code], timeout_s)
        return json.loads(out.strip().splitlines()[-1])

    def pids(self, i: int) -> list[int]:
        out = subprocess.run([TOOL, "pids", f"{self.prefix}{i}"], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def pss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
    return total / 1024


def cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rfind(b")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def measure(framework: str, n: int, tasks: int, prefix: str) -> dict:
    out: dict = {"framework": framework, "nodes": n, "load_avg_1m": os.getloadavg()[0]}
    with Hosts(framework, n, prefix) as hosts:
        out.update(hosts.start())
        time.sleep(10)  # let start-up work settle
        mems = sorted(pss_mib(hosts.pids(i)) for i in range(2, n + 2))
        out["node_mib"] = mems[len(mems) // 2]
        out["head_host_mib"] = pss_mib(hosts.pids(1))
        head = hosts.pids(1)
        c0, t0 = cpu_s(head), time.monotonic()
        time.sleep(20)
        out["head_idle_cpu_pct"] = 100 * (cpu_s(head) - c0) / (time.monotonic() - t0)
        if tasks:
            try:
                out.update(hosts.driver_json(SPREAD, tasks=tasks))
            except Exception as e:  # noqa: BLE001  keep what was measured; say why this part failed
                out["spread_error"] = str(e)[-1500:]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[25, 50])
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--only-ray", action="store_true")
    args = p.parse_args()
    if subprocess.run([TOOL, "check"], capture_output=True).returncode != 0:
        sys.exit("netns-hosts cannot run here (root, iproute2 and namespaces are needed)")
    frameworks = ["raylite"] * (not args.only_ray) + ["ray"] * (not args.no_ray and os.path.exists(RAY_PYTHON))
    rows = []
    for n in args.nodes:
        for fw in frameworks:
            try:
                row = measure(fw, n, args.tasks, f"n{'l' if fw == 'raylite' else 'y'}{n}x")
            except Exception as e:  # noqa: BLE001  report the case, go on with the next
                row = {"framework": fw, "nodes": n, "error": str(e)[-2000:]}
            emit(row)
            rows.append(row)
    cols = ["framework", "nodes", "node_start_s", "all_joined_s", "node_mib", "head_idle_cpu_pct", "spread_s",
            "spread_nodes", "load_avg_1m"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols), file=sys.stderr)
    for r in rows:
        print("| " + " | ".join(f"{r[k]:.3g}" if isinstance(r.get(k), float) else str(r.get(k, ""))
                                for k in cols) + " |", file=sys.stderr)


if __name__ == "__main__":
    main()
