"""The head under hundreds to thousands of nodes, measured with simulated nodes.

    python bench/head_scale.py                        # 100, 1,000 and 5,000 simulated nodes
    python bench/head_scale.py --nodes 1000 --tasks 20000

A real head (`raylite start --head --num-cpus 0`, so every task lands on a simulated node)
and, in another process, `raylite.testing.node_sim` with N simulated nodes of 2 CPUs each
(they register, heartbeat every 0.5 s with resource reports and statistics like a node
daemon, grant leases and answer tasks at once). For each N it records:
- join_s: all N nodes registered;
- head_idle_cpu_pct: the head process's CPU over 10 s with every node heartbeating;
- head_kib_per_node: the head's unique memory (USS) after the nodes joined, minus before, / N;
- nodes_s / status_s: `ray.nodes()` and `raylite status` (cluster_status) on N nodes;
- tasks_s: 100,000 SPREAD tasks (num_cpus=1) submitted and fetched; nodes_used; the CPU
  seconds the head, the driver and the simulator spent on them (tasks_*_cpu_s);
- actors_s: N actors (num_cpus=1, SPREAD, max_restarts=-1) created and ALIVE;
- dead_detect_s: 10% of the nodes go silent at once (a cut link: no heartbeats, no answers);
  seconds until the head lists every one of them dead (target: node_dead_timeout_s + 1);
- dead_resched_s: seconds from the silence until their actors are ALIVE on other nodes.
JSON lines on stdout; a table on stderr. `tasks_spread_over_simulated_nodes()` is the row
"100,000 tasks spread over N nodes" of bench/envelope.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402  (this folder is not a package)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEAD_TIMEOUT_S = 5.0  # raylite's default node_dead_timeout_s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimCluster:
    """A real head plus one node_sim process with `n` nodes; everything under a private temp dir."""

    def __init__(self, n: int, cpus: float = 2.0) -> None:
        self.n = n
        self.cpus = cpus
        self.temp = tempfile.mkdtemp(prefix="rlhs", dir="/tmp")
        os.environ["RAYLITE_TEMP_DIR"] = self.temp
        from raylite._core import config as config_mod

        config_mod._CONFIG = None
        self.config = config_mod.get_config()
        self.head = None
        self.sim: subprocess.Popen | None = None
        self.node_ids: list[str] = []

    def start_head(self) -> None:
        from raylite._core.cluster import cluster as C

        self.head = C.start_node(self.config, head=True, port=_free_port(), node_ip="127.0.0.1", num_cpus=0)
        self.address = self.head.address
        self.token = open(os.path.join(self.head.session_dir, "token")).read()

    def start_sim(self) -> float:
        env = dict(os.environ, RAYLITE_TOKEN=self.token, PYTHONPATH=REPO)
        self.sim = subprocess.Popen(
            [sys.executable, "-m", "raylite.testing.node_sim", "--address", f"tcp://{self.address}",
             "--nodes", str(self.n), "--cpus", str(self.cpus)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.sim.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"node_sim did not start: {line!r}")
        info = json.loads(line[6:])
        self.node_ids = info["node_ids"]
        return info["start_s"]

    def command(self, line: str):
        self.sim.stdin.write(line + "\n")
        self.sim.stdin.flush()
        reply = self.sim.stdout.readline()
        if not reply.startswith("OK "):
            raise RuntimeError(f"node_sim: {reply!r}")
        return json.loads(reply[3:])

    def close(self) -> None:
        import raylite
        from raylite._core.cluster import cluster as C

        with contextlib.suppress(Exception):
            raylite.shutdown()
        if self.sim is not None and self.sim.poll() is None:
            with contextlib.suppress(Exception):
                self.sim.stdin.write("quit\n")
                self.sim.stdin.flush()
                self.sim.wait(20)
            if self.sim.poll() is None:
                self.sim.kill()
                self.sim.wait()
        with contextlib.suppress(Exception):
            C.stop_nodes(self.config, grace_s=10)
        shutil.rmtree(self.temp, ignore_errors=True)


def _cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _uss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_full_info().uss


def _alive_in_head(c: SimCluster) -> set[str]:
    from raylite._core.cluster.driver import query_cluster

    return {n["node_id"].hex() for n in query_cluster(c.address, c.token, 60) if n["alive"]}


def _wait(predicate, timeout_s: float, poll_s: float = 0.1) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"still waiting after {timeout_s}s")
        time.sleep(poll_s)
    return time.monotonic() - t0


def run_tasks(n_tasks: int) -> float:
    import raylite as ray

    @ray.remote(num_cpus=1)
    def noop():
        return None

    t0 = time.perf_counter()
    refs = [noop.options(scheduling_strategy="SPREAD").remote() for _ in range(n_tasks)]
    ray.get(refs)
    return time.perf_counter() - t0


def tasks_spread_over_simulated_nodes(n_nodes: int, n_tasks: int = 100_000) -> dict:
    """The envelope's row: seconds to submit and fetch `n_tasks` SPREAD tasks over `n_nodes`
    simulated nodes (real head and driver; the nodes answer tasks at once)."""
    import raylite as ray

    c = SimCluster(n_nodes)
    try:
        c.start_head()
        c.start_sim()
        ray.init(address=c.address, log_to_driver=False)
        wall = run_tasks(n_tasks)
        used = c.command("stats")["nodes_with_tasks"]
        return {"nodes": n_nodes, "tasks": n_tasks, "wall_s": wall, "nodes_used": used, "finished": True}
    finally:
        c.close()


def measure(n: int, n_tasks: int, idle_s: float) -> dict:
    import raylite as ray
    from raylite._core.cluster import cluster as C

    out: dict = {"nodes": n}
    c = SimCluster(n)
    try:
        c.start_head()
        time.sleep(2.0)
        base_uss = _uss(c.head.pid)
        out["join_s"] = c.start_sim()
        _wait(lambda: len(_alive_in_head(c)) >= n, 120, 0.5)
        time.sleep(3.0)  # every node has sent statistics at least once
        cpu0, t0 = _cpu_s(c.head.pid), time.monotonic()
        time.sleep(idle_s)
        out["head_idle_cpu_pct"] = 100 * (_cpu_s(c.head.pid) - cpu0) / (time.monotonic() - t0)
        out["head_kib_per_node"] = (_uss(c.head.pid) - base_uss) / n / 1024
        ray.init(address=c.address, log_to_driver=False)
        t = time.perf_counter()
        nodes = ray.nodes()
        out["nodes_s"] = time.perf_counter() - t
        assert len(nodes) >= n
        t = time.perf_counter()
        C.format_status(C.cluster_status(c.config, c.address))
        out["status_s"] = time.perf_counter() - t
        before = c.command("stats")["tasks_run"]
        out["tasks"] = n_tasks
        cpu = (_cpu_s(c.head.pid), _cpu_s(c.sim.pid), time.process_time())
        out["tasks_s"] = run_tasks(n_tasks)
        # CPU seconds each process spent on the burst: unlike wall time, not inflated by a
        # loaded machine; the head's and the driver's are raylite's cost, the simulator's not
        out["tasks_head_cpu_s"] = _cpu_s(c.head.pid) - cpu[0]
        out["tasks_sim_cpu_s"] = _cpu_s(c.sim.pid) - cpu[1]
        out["tasks_driver_cpu_s"] = time.process_time() - cpu[2]
        stats = c.command("stats")
        out["tasks_run"] = stats["tasks_run"] - before
        out["nodes_used"] = stats["nodes_with_tasks"]
        out.update(_actor_wave(c, n))
    finally:
        c.close()
    return out


def _actor_wave(c: SimCluster, n: int) -> dict:
    """N actors, one per node (SPREAD, 1 of the node's 2 CPUs); then 10% of the nodes go silent."""
    import raylite as ray
    from raylite._core import protocol as P
    from raylite.api import ensure_initialized

    @ray.remote(num_cpus=1, max_restarts=-1, scheduling_strategy="SPREAD")
    class A:
        def ping(self):
            return None

    client = ensure_initialized()

    def actor_rows() -> list[dict]:
        return client.head_request(P.ListActors()).actors

    out: dict = {}
    t = time.perf_counter()
    actors = [A.remote() for _ in range(n)]
    ray.get([a.ping.remote() for a in actors])
    out["actors_s"] = time.perf_counter() - t
    time.sleep(1.0)
    victims = set(c.command(f"silence {max(1, n // 10)}"))
    t0 = time.monotonic()
    _wait(lambda: not (victims & _alive_in_head(c)), 60, 0.2)
    out["dead_nodes"] = len(victims)
    out["dead_detect_s"] = time.monotonic() - t0
    _wait(lambda: all(r["state"] == "ALIVE" and r["node_id"].hex() not in victims for r in actor_rows()), 120, 0.2)
    out["dead_resched_s"] = time.monotonic() - t0
    out["actors_moved"] = sum(1 for r in actor_rows() if r["num_restarts"] > 0)
    return out


def _table(rows: list[dict]) -> str:
    cols = ["nodes", "join_s", "head_idle_cpu_pct", "head_kib_per_node", "nodes_s", "status_s", "tasks_s",
            "tasks_head_cpu_s", "tasks_driver_cpu_s", "nodes_used", "actors_s", "dead_nodes", "dead_detect_s", "dead_resched_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for k in cols:
            v = r.get(k, "")
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--idle-s", type=float, default=10.0)
    args = p.parse_args()
    rows = []
    for n in args.nodes:
        load = os.getloadavg()[0]
        row = measure(n, args.tasks, args.idle_s)
        row["load_avg_1m"] = load
        emit(row)
        rows.append(row)
    print(_table(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
