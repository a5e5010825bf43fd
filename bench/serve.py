"""Serve benchmark: raylite vs Ray Serve (its own virtualenv) vs plain uvicorn, one run, same load.

    python bench/serve.py [--duration 5] [--repeats 3] [--ray-python /opt/rayvenv/bin/python]
                          [--only raylite,ray,plain] [--json out.json]
    python bench/serve.py --faults [--clients 16] [--after 12] [--repeats 3] [--only raylite,ray]

Load comes from `wrk` (apt-get install wrk) on loopback, with keep-alive connections. Each
framework runs in its own process tree; each figure is the median over --repeats runs.
Scenarios (issue 10): (1) trivial deployment, 2 replicas, 32 connections; (2) two deployments
composed through a handle; (3) a @serve.batch deployment; (4) FastAPI ingress vs the same plain
FastAPI app; (5) latency at 1, 64 and 512 connections; (6) serve.run() to the first 200 in a
fresh process; (7) PSS of the whole process tree with 2 replicas.

`--faults` (issue 17) measures instead what SIGKILL of the HTTP proxy, of a replica and of the
controller costs under steady load (bench/serve_faults.py: requests, non-2xx, connection errors,
time to recover, for raylite and Ray Serve side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ------------------------------------------------------------------ load generation
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000.0 if unit == "us" else v * 1000.0 if unit == "s" else v


def wrk(url: str, connections: int, duration_s: float) -> dict:
    threads = max(1, min(2, connections))
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, int(duration_s))}s", "--latency", "--timeout",
                          "10s", url], capture_output=True, text=True, timeout=duration_s + 60).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": float(rps.group(1)) if rps else 0.0, "p50_ms": _ms(p50.group(1)) if p50 else float("nan"),
            "p99_ms": _ms(p99.group(1)) if p99 else float("nan"),
            "non2xx": int(non2xx.group(1)) if non2xx else 0, "socket_errors": errors.group(1) if errors else ""}


def median_runs(url: str, connections: int, duration_s: float, repeats: int) -> dict:
    runs = [wrk(url, connections, duration_s) for _ in range(repeats)]
    return {k: statistics.median([r[k] for r in runs]) for k in ("rps", "p50_ms", "p99_ms")} | {
        "non2xx": sum(r["non2xx"] for r in runs)}


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s}s")


def tree_pss_mib(root_pid: int) -> float:
    """Sum of PSS over root_pid and all its descendants (whole tree, shared pages split)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    total_kb = 0
    stack = [root_pid]
    seen = 0
    while stack:
        pid = stack.pop()
        seen += 1
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total_kb += int(line.split()[1])
        except OSError:
            pass
    print(f"  PSS: {seen} processes in the tree of {root_pid}", file=sys.stderr)
    return total_kb / 1024.0


# ------------------------------------------------------------------ the served apps (raylite and Ray)
def serve_worker(framework: str, port: int, scenario: str) -> None:
    """Runs inside the framework's interpreter: deploy `scenario`, print READY, wait for stdin EOF."""
    if framework == "raylite":
        sys.path.insert(0, ROOT)
        import raylite as ray
        from raylite import serve
    else:
        import ray
        from ray import serve
    ray.init(num_cpus=8, include_dashboard=False) if framework == "ray" else ray.init(num_cpus=8)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    if scenario == "trivial":
        @serve.deployment(num_replicas=2)
        class Trivial:
            def __call__(self, request) -> str:
                return "ok"

        app = Trivial.bind()
    elif scenario == "composition":
        @serve.deployment(num_replicas=1)
        class Model:
            def predict(self, x: str) -> str:
                return x.upper()

        @serve.deployment(num_replicas=1)
        class Ingress:
            def __init__(self, model) -> None:
                self.model = model

            async def __call__(self, request) -> str:
                return await self.model.predict.remote("ok")

        app = Ingress.bind(Model.bind())
    elif scenario == "batch":
        @serve.deployment(num_replicas=1, max_ongoing_requests=64)
        class Batched:
            @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
            async def handle(self, items: list) -> list:
                return [f"ok{len(items)}" for _ in items]

            async def __call__(self, request) -> str:
                return await self.handle(1)

        app = Batched.bind()
    elif scenario == "fastapi":
        from fastapi import FastAPI

        api = FastAPI()

        @serve.deployment(num_replicas=2)
        @serve.ingress(api)
        class Api:
            @api.get("/")
            def root(self) -> dict:
                return {"ok": True}

        app = Api.bind()
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    serve.run(app, route_prefix="/")
    print("READY", os.getpid(), flush=True)
    sys.stdin.read()
    serve.shutdown()
    ray.shutdown()


def first_200_worker(framework: str, port: int) -> None:
    """Fresh process: import, init, serve.run a trivial app, GET until 200; prints seconds."""
    t0 = time.monotonic()
    if framework == "raylite":
        sys.path.insert(0, ROOT)
        import raylite as ray
        from raylite import serve
    else:
        import ray
        from ray import serve
    import urllib.request

    ray.init(num_cpus=8, include_dashboard=False) if framework == "ray" else ray.init(num_cpus=8)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment
    def hello(request) -> str:
        return "ok"

    serve.run(hello.bind())
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:  # noqa: BLE001
            time.sleep(0.01)
    print("FIRST200", time.monotonic() - t0, flush=True)
    serve.shutdown()
    ray.shutdown()


# ------------------------------------------------------------------ plain uvicorn baselines
PLAIN_APP = '''
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from fastapi import FastAPI

async def hello(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[Route("/", hello)])
api = FastAPI()

@api.get("/")
def root() -> dict:
    return {"ok": True}
'''


def start_plain(kind: str, port: int, tmpdir: str) -> subprocess.Popen:
    with open(os.path.join(tmpdir, "plain_bench_app.py"), "w") as f:
        f.write(PLAIN_APP)
    target = "plain_bench_app:app" if kind == "starlette" else "plain_bench_app:api"
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "2", "--log-level", "warning", "--no-access-log"], cwd=tmpdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/")
    return proc


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)


# ------------------------------------------------------------------ orchestration
def run_framework(framework: str, python: str, args: argparse.Namespace) -> dict:
    results: dict = {}
    env = dict(os.environ)
    if framework == "raylite":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    else:
        env.pop("PYTHONPATH", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
    for scenario in ("trivial", "composition", "batch", "fastapi"):
        port = free_port()
        proc = subprocess.Popen([python, __file__, "--worker", framework, "--port", str(port), "--scenario",
                                 scenario], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env, start_new_session=True)
        try:
            line = ""
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line or line.startswith("READY"):
                    break
            if not line.startswith("READY"):
                results[scenario] = {"error": "did not start"}
                continue
            pid = int(line.split()[1])
            url = f"http://127.0.0.1:{port}/"
            wrk(url, 32, 1)  # warm-up
            results[scenario] = median_runs(url, 32, args.duration, args.repeats)
            if scenario == "trivial":
                results["pss_mib_2_replicas"] = round(tree_pss_mib(pid), 1)
                for c in (1, 64, 512):
                    results[f"latency_c{c}"] = median_runs(url, c, args.duration, args.repeats)
            print(f"  {framework} {scenario}: {results[scenario]}", file=sys.stderr, flush=True)
        finally:
            try:
                proc.stdin.close()
                proc.wait(timeout=60)
            except Exception:  # noqa: BLE001
                pass
            stop(proc)
    times = []
    for _ in range(args.repeats):
        port = free_port()
        out = subprocess.run([python, __file__, "--first200", framework, "--port", str(port)], capture_output=True,
                             text=True, env=env, timeout=300)
        m = re.search(r"FIRST200 ([\d.]+)", out.stdout)
        if m:
            times.append(float(m.group(1)))
    results["first_200_s"] = round(statistics.median(times), 2) if times else None
    return results


def run_plain(args: argparse.Namespace) -> dict:
    import tempfile

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("starlette", "fastapi"):
            port = free_port()
            proc = start_plain(kind, port, tmp)
            try:
                url = f"http://127.0.0.1:{port}/"
                wrk(url, 32, 1)
                results[kind] = median_runs(url, 32, args.duration, args.repeats)
                if kind == "starlette":
                    for c in (1, 64, 512):
                        results[f"latency_c{c}"] = median_runs(url, c, args.duration, args.repeats)
                    results["pss_mib"] = round(tree_pss_mib(proc.pid), 1)
            finally:
                stop(proc)
    return results


def table(res: dict) -> str:
    def cell(fw: str, key: str, field: str = "rps") -> str:
        r = res.get(fw, {}).get(key)
        if not isinstance(r, dict) or field not in r:
            return "n/a"
        v = r[field]
        return f"{v:,.0f}" if field == "rps" else f"{v:.1f}"

    rows = ["| scenario | raylite | Ray Serve 2.60 | plain uvicorn (2 procs) |", "|---|---|---|---|"]
    for key, label, plain_key in (("trivial", "(1) trivial, 2 replicas, 32 conns: req/s", "starlette"),
                                  ("composition", "(2) 2-deployment composition: req/s", None),
                                  ("batch", "(3) @serve.batch: req/s", None),
                                  ("fastapi", "(4) FastAPI ingress: req/s", "fastapi")):
        rows.append(f"| {label} | {cell('raylite', key)} | {cell('ray', key)} | "
                    f"{cell('plain', plain_key) if plain_key else '-'} |")
        rows.append(f"| {label.split(':')[0]}: p50 / p99 ms | {cell('raylite', key, 'p50_ms')} / "
                    f"{cell('raylite', key, 'p99_ms')} | {cell('ray', key, 'p50_ms')} / {cell('ray', key, 'p99_ms')} | "
                    + (f"{cell('plain', plain_key, 'p50_ms')} / {cell('plain', plain_key, 'p99_ms')} |"
                       if plain_key else "- |"))
    for c in (1, 64, 512):
        k = f"latency_c{c}"
        rows.append(f"| (5) {c} conns: req/s, p50 / p99 ms | {cell('raylite', k)}, {cell('raylite', k, 'p50_ms')} / "
                    f"{cell('raylite', k, 'p99_ms')} | {cell('ray', k)}, {cell('ray', k, 'p50_ms')} / "
                    f"{cell('ray', k, 'p99_ms')} | {cell('plain', k)}, {cell('plain', k, 'p50_ms')} / "
                    f"{cell('plain', k, 'p99_ms')} |")
    rows.append(f"| (6) serve.run() to first 200, fresh process: s | {res.get('raylite', {}).get('first_200_s', 'n/a')} | "
                f"{res.get('ray', {}).get('first_200_s', 'n/a')} | - |")
    rows.append(f"| (7) PSS of the tree, 2 replicas: MiB | {res.get('raylite', {}).get('pss_mib_2_replicas', 'n/a')} | "
                f"{res.get('ray', {}).get('pss_mib_2_replicas', 'n/a')} | {res.get('plain', {}).get('pss_mib', 'n/a')} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray-python", default="/opt/rayvenv/bin/python")
    ap.add_argument("--only", default="raylite,ray,plain")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="")
    ap.add_argument("--first200", default="")
    ap.add_argument("--scenario", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--faults", action="store_true", help="kill proxy / replica / controller under load")
    ap.add_argument("--clients", type=int, default=16, help="--faults: concurrent keep-alive clients")
    ap.add_argument("--steady", type=float, default=3.0, help="--faults: seconds of load before each kill")
    ap.add_argument("--after", type=float, default=12.0, help="--faults: seconds observed after each kill")
    args = ap.parse_args()
    if args.worker:
        return serve_worker(args.worker, args.port, args.scenario)
    if args.first200:
        return first_200_worker(args.first200, args.port)
    if args.faults:
        import serve_faults

        return serve_faults.main(set(args.only.split(",")), args.ray_python, args.clients, args.steady, args.after,
                                 args.repeats, args.json)
    if subprocess.run(["which", "wrk"], capture_output=True).returncode != 0:
        raise SystemExit("bench/serve.py needs `wrk` on PATH (apt-get install wrk)")
    only = set(args.only.split(","))
    res: dict = {}
    if "raylite" in only:
        res["raylite"] = run_framework("raylite", sys.executable, args)
    if "ray" in only:
        if os.path.exists(args.ray_python):
            res["ray"] = run_framework("ray", args.ray_python, args)
        else:
            print(f"Ray not found at {args.ray_python}; skipping", file=sys.stderr)
    if "plain" in only:
        res["plain"] = run_plain(args)
    print(table(res))
    load = os.getloadavg()
    print(f"\nload average during the run: {load[0]:.1f} (cores: {os.cpu_count()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
