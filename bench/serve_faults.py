"""Serve under faults: steady load, then SIGKILL of the HTTP proxy, of a replica, of the
controller -- for raylite and Ray Serve side by side. Run through `python bench/serve.py --faults`.

Each framework serves a trivial deployment (2 replicas) in its own process tree; a load
generator here keeps `--clients` keep-alive connections busy (a connection that fails is
reopened after 10 ms; each request times out after 10 s). For each kill it reports, over the
`--after` seconds that follow it:
  requests         answered requests (any status)
  non-2xx          answers with another status
  conn errors      requests that got no answer (refused, reset, timed out)
  recover s        from the kill until answers flow again: the end of the last failed request,
                   or the first 2xx answer to a request sent after the kill if that is later
  replaced s       from the kill until a new process of that role runs (asked of the framework)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FAULTS = ("proxy", "replica", "controller")
# each framework's actor names: role -> name prefix (namespace "serve")
NAMES = {"raylite": {"proxy": "SERVE_PROXY::", "replica": "SERVE_REPLICA::", "controller": "SERVE_CONTROLLER_ACTOR"},
         "ray": {"proxy": "SERVE_PROXY_ACTOR", "replica": "SERVE_REPLICA::", "controller": "SERVE_CONTROLLER_ACTOR"}}


# ------------------------------------------------------------------ inside the framework's interpreter
def fault_worker(framework: str, port: int) -> None:
    """Serve a trivial app; then obey stdin lines `kill ROLE`: SIGKILL one process of that role,
    print `KILLED ROLE t`, wait for its replacement, print `BACK ROLE t`."""
    if framework == "raylite":
        sys.path.insert(0, ROOT)
        import raylite as ray
        from raylite import serve
    else:
        import ray
        from ray import serve
    ray.init(num_cpus=8, include_dashboard=False) if framework == "ray" else ray.init(num_cpus=8)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(num_replicas=2)
    class Trivial:
        def __call__(self, request) -> str:
            return "ok"

    serve.run(Trivial.bind(), route_prefix="/")
    print("READY", os.getpid(), flush=True)
    names = NAMES[framework]
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 2 or parts[0] != "kill":
            continue
        role = parts[1]
        before = _pids(ray, framework, names[role])
        victim = sorted(before.values())[0]
        t = time.time()
        os.kill(victim, signal.SIGKILL)
        print("KILLED", role, t, flush=True)
        want = len(before)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = _pids(ray, framework, names[role])
            if len(now) >= want and victim not in now.values():
                break
            time.sleep(0.02)
        print("BACK", role, time.time() if time.monotonic() < deadline else -1, flush=True)
    serve.shutdown()
    ray.shutdown()


def _pids(ray: object, framework: str, prefix: str) -> dict[str, int]:
    """name -> pid of the live, answering actors in namespace "serve" whose name starts with prefix."""
    out: dict[str, int] = {}
    if framework == "raylite":
        from raylite.util.state import list_actors

        try:
            rows = list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=1000)
        except Exception:  # noqa: BLE001 - the head is busy: ask again
            return out
        for a in rows:
            d = a if isinstance(a, dict) else vars(a)
            if (d.get("name") or "").startswith(prefix) and d.get("pid"):
                out[d["name"]] = d["pid"]
        return out
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != "serve" or not entry["name"].startswith(prefix):
            continue
        try:
            actor = ray.get_actor(entry["name"], namespace="serve")
            out[entry["name"]] = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=2)
        except Exception:  # noqa: BLE001 - dead or restarting
            pass
    return out


# ------------------------------------------------------------------ the load
class Load:
    """`clients` keep-alive HTTP/1.1 connections on an event loop in a thread; every request's
    (start, end, status) is kept; status -1 is a connection error or a timeout."""

    REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def __init__(self, port: int, clients: int) -> None:
        self.port = port
        self.clients = clients
        self.records: list[tuple[float, float, int]] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(30)

    def _run(self) -> None:
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def all_clients() -> None:
            await asyncio.gather(*[self._client() for _ in range(self.clients)])

        loop.run_until_complete(all_clients())
        loop.close()

    async def _client(self) -> None:
        writer = reader = None
        while not self.stopping:
            t0 = time.time()
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
                writer.write(self.REQUEST)
                status, close = await asyncio.wait_for(_read_response(reader), 10)
                self.records.append((t0, time.time(), status))
                if close:
                    writer.close()
                    writer = None
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                self.records.append((t0, time.time(), -1))
                if writer is not None:
                    writer.close()
                writer = None
                await asyncio.sleep(0.01)
        if writer is not None:
            writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip().lower()
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection") == "close"


def fault_metrics(records: list, kill_t: float, after_s: float, back_t: float) -> dict:
    """Metrics of the `after_s` seconds after a kill (see the module docstring). Recovered: the
    later of the end of the last failed request and the first 2xx answer to a request sent
    after the kill (pauses of a loaded machine, which also happen without a kill, do not count)."""
    window = [r for r in records if kill_t <= r[1] < kill_t + after_s]
    fresh_ok = [r[1] for r in window if r[0] >= kill_t and 200 <= r[2] < 300]
    failed = [r[1] for r in window if not 200 <= r[2] < 300]
    recover = None
    if fresh_ok:
        recover = max([min(fresh_ok)] + failed) - kill_t
        if failed and max(failed) > max(fresh_ok):
            recover = None  # still failing at the end of the window
    before = [r for r in records if kill_t - 2.0 <= r[1] < kill_t and r[2] != -1]
    return {"requests": sum(1 for r in window if r[2] != -1),
            "non2xx": sum(1 for r in window if r[2] != -1 and not 200 <= r[2] < 300),
            "conn_errors": sum(1 for r in window if r[2] == -1),
            "recover_s": None if recover is None else round(recover, 3),
            "replaced_s": round(back_t - kill_t, 2) if back_t > 0 else None,
            "rate_before": round(len(before) / 2.0)}


# ------------------------------------------------------------------ orchestration
def run_faults(framework: str, python: str, clients: int, steady_s: float, after_s: float) -> dict:
    from serve import free_port, stop  # bench/serve.py

    env = dict(os.environ)
    if framework == "raylite":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    else:
        env.pop("PYTHONPATH", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
    port = free_port()
    proc = subprocess.Popen([python, __file__, "--worker", framework, "--port", str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    out: dict = {}
    load = Load(port, clients)
    try:
        if not _expect(proc, "READY", 240):
            return {"error": "did not start"}
        load.start()
        for role in FAULTS:
            time.sleep(steady_s)
            proc.stdin.write(f"kill {role}\n")
            proc.stdin.flush()
            killed = _expect(proc, "KILLED", 60)
            back = _expect(proc, "BACK", 90)
            kill_t = float(killed.split()[2]) if killed else time.time()
            back_t = float(back.split()[2]) if back else -1.0
            time.sleep(max(0.0, kill_t + after_s - time.time()))
            out[role] = fault_metrics(load.records, kill_t, after_s, back_t)
            print(f"  {framework} kill {role}: {out[role]}", file=sys.stderr, flush=True)
    finally:
        load.stop()
        try:
            proc.stdin.close()
            proc.wait(timeout=60)
        except Exception:  # noqa: BLE001
            pass
        stop(proc)
    return out


def _expect(proc: subprocess.Popen, word: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return ""
        if line.startswith(word):
            return line
    return ""


def table(res: dict) -> str:
    def cell(fw: str, role: str) -> str:
        m = res.get(fw, {}).get(role)
        if not isinstance(m, dict):
            return "n/a"
        rec = "not within the window" if m["recover_s"] is None else f"{m['recover_s']:.2f}"
        rep = "n/a" if m["replaced_s"] is None else f"{m['replaced_s']:.2f}"
        return f"{m['requests']:,} / {m['non2xx']} / {m['conn_errors']} / {rec} / {rep}"

    rows = ["| SIGKILL of | raylite | Ray Serve 2.60 |", "|---|---|---|"]
    for role in FAULTS:
        rows.append(f"| {role} | {cell('raylite', role)} | {cell('ray', role)} |")
    rows.append("\ncells: requests answered / non-2xx / connection errors / recover s / replaced s, "
                "over the seconds after the kill")
    return "\n".join(rows)


def main(only: set, ray_python: str, clients: int, steady_s: float, after_s: float, rounds: int,
         json_path: str = "") -> None:
    sys.path.insert(0, HERE)
    res: dict = {}
    runs: dict = {"raylite": [], "ray": []}
    for _ in range(rounds):  # interleaved: raylite, then Ray, per round
        if "raylite" in only:
            runs["raylite"].append(run_faults("raylite", sys.executable, clients, steady_s, after_s))
        if "ray" in only:
            if os.path.exists(ray_python):
                runs["ray"].append(run_faults("ray", ray_python, clients, steady_s, after_s))
            else:
                print(f"Ray not found at {ray_python}; skipping", file=sys.stderr)
    for fw, rs in runs.items():
        if rs:
            res[fw] = {role: _median_metrics([r.get(role) for r in rs]) for role in FAULTS}
    print(table(res))
    load = os.getloadavg()
    print(f"\nload average during the run: {load[0]:.1f} (cores: {os.cpu_count()}); {rounds} round(s), "
          f"{clients} clients, {after_s:.0f} s observed after each kill")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"median": res, "runs": runs}, f, indent=1)


def _median_metrics(ms: list) -> dict | None:
    ms = [m for m in ms if isinstance(m, dict)]
    if not ms:
        return None
    out = {}
    for key in ("requests", "non2xx", "conn_errors", "rate_before"):
        out[key] = int(statistics.median(m[key] for m in ms))
    for key in ("recover_s", "replaced_s"):
        vals = [m[key] for m in ms]
        out[key] = None if any(v is None for v in vals) else round(statistics.median(vals), 2)
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    fault_worker(a.worker, a.port)
