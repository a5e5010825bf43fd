"""The Serve REST API on the head (what `serve deploy` and KubeRay's RayService use), raylite vs Ray.

    python bench/serve_rest_api.py [--calls 50] [--ray-venv /opt/rayvenv]

For each system: a head started with its CLI (`raylite start --head`, or `ray start --head` from
the Ray virtualenv when it exists), then over HTTP as Ray's clients do: the first GET (raylite
starts its Serve agent then), PUT of a one-application config -> RUNNING, GET latency (p50/p95),
the same PUT again (must keep the replica), DELETE, and the memory of the process that serves the
API's Serve calls (raylite: its agent; Ray: its dashboard). Prints one JSON line per system and
a side-by-side table. Numbers, not assertions: tests check behaviour.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import httpx

APP = textwrap.dedent("""
    try:
        from ray import serve
    except ImportError:
        from raylite import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.5})
    class Echo:
        def __call__(self, request):
            return "ok"

    app = Echo.bind()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(app_dir: str, http_port: int) -> dict:
    return {"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": http_port},
            "applications": [{"name": "echo", "route_prefix": "/echo", "import_path": "echo_bench:app",
                              "runtime_env": {"working_dir": f"local://{app_dir}"}}]}


def rss_mib(pattern: str, env_marker: str) -> float:
    """RSS of the processes whose command line has `pattern` and whose environment has `env_marker`."""
    import psutil

    total = 0
    for p in psutil.process_iter(["cmdline"]):
        try:
            if pattern in " ".join(p.info["cmdline"] or []) and env_marker in open(f"/proc/{p.pid}/environ").read():
                total += p.memory_info().rss
        except (OSError, psutil.Error):
            continue
    return total / 2**20


def measure(url: str, headers: dict, app_dir: str, calls: int, agent: tuple[str, str]) -> dict:
    out: dict = {}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        start = time.perf_counter()
        assert c.get("/api/serve/applications/").status_code == 200
        out["first_get_ms"] = (time.perf_counter() - start) * 1e3
        http_port = free_port()
        start = time.perf_counter()
        r = c.put("/api/serve/applications/", json=config(app_dir, http_port))
        assert r.status_code == 200, r.text
        out["put_ms"] = (time.perf_counter() - start) * 1e3
        while True:
            app = c.get("/api/serve/applications/").json()["applications"].get("echo")
            if app and app["status"] == "RUNNING":
                break
            if app and app["status"] == "DEPLOY_FAILED":
                raise RuntimeError(app["message"])
            time.sleep(0.05)
        out["put_to_running_s"] = time.perf_counter() - start
        assert httpx.get(f"http://127.0.0.1:{http_port}/echo", timeout=30).text == "ok"
        lat = []
        for _ in range(calls):
            start = time.perf_counter()
            c.get("/api/serve/applications/", params={"api_type": "declarative"})
            lat.append((time.perf_counter() - start) * 1e3)
        lat.sort()
        out["get_p50_ms"], out["get_p95_ms"] = statistics.median(lat), lat[int(len(lat) * 0.95) - 1]
        replicas = [r["replica_id"] for r in app["deployments"]["Echo"]["replicas"]]
        start = time.perf_counter()
        assert c.put("/api/serve/applications/", json=config(app_dir, http_port)).status_code == 200
        out["same_put_ms"] = (time.perf_counter() - start) * 1e3
        after = c.get("/api/serve/applications/").json()["applications"]["echo"]["deployments"]["Echo"]["replicas"]
        out["same_put_kept_replica"] = [r["replica_id"] for r in after] == replicas
        out["api_serve_process_rss_mib"] = round(rss_mib(*agent), 1)
        start = time.perf_counter()
        assert c.delete("/api/serve/applications/").status_code == 200
        out["delete_ms"] = (time.perf_counter() - start) * 1e3
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def run_raylite(base: str, app_dir: str, calls: int) -> dict:
    token = secrets.token_hex(16)
    port, api_port = free_port(), free_port()
    env = dict(os.environ, RAYLITE_TEMP_DIR=os.path.join(base, "raylite"), RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=token)
    cli = [sys.executable, "-m", "raylite.cli"]
    subprocess.run([*cli, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    f"--dashboard-port={api_port}"], env=env, check=True, capture_output=True, timeout=120)
    try:
        return measure(f"http://127.0.0.1:{api_port}", {"Authorization": f"Bearer {token}"}, app_dir, calls,
                       ("raylite.serve._internal.rest_agent", env["RAYLITE_TEMP_DIR"]))
    finally:
        subprocess.run([*cli, "stop"], env=env, capture_output=True, timeout=120)


def run_ray(base: str, app_dir: str, calls: int, venv: str) -> dict:
    ray = os.path.join(venv, "bin", "ray")
    port, api_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLITE_"))}
    env.update(RAY_TMPDIR=os.path.join(base, "ray"), PYTHONPATH="")
    os.makedirs(env["RAY_TMPDIR"], exist_ok=True)
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=true",
                    f"--dashboard-port={api_port}", "--disable-usage-stats"], env=env, check=True,
                   capture_output=True, timeout=300)
    try:
        url = f"http://127.0.0.1:{api_port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # Ray's dashboard comes up after `ray start` returns
            try:
                if httpx.get(url + "/api/ray/version", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        # Ray 2.60's head turns token auth on when ~/.ray/auth_token exists
        token_file = os.path.expanduser("~/.ray/auth_token")
        headers = {"Authorization": f"Bearer {open(token_file).read().strip()}"} if os.path.exists(token_file) else {}
        return measure(url, headers, app_dir, calls, ("dashboard.py", env["RAY_TMPDIR"]))
    finally:  # never `ray stop`: it stops every Ray cluster on the machine, not only this one
        stop_marked(env["RAY_TMPDIR"])


def stop_marked(marker: str) -> None:
    """Stop the processes started for this run: those whose environment holds `marker`."""
    import psutil

    mine = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and marker in open(f"/proc/{p.pid}/environ").read():
                mine.append(p)
        except (OSError, psutil.Error):
            continue
    for p in mine:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(mine, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--ray-venv", default=os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv"))
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="rlrest", dir="/tmp")
    app_dir = os.path.join(base, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "echo_bench.py"), "w") as f:
        f.write(APP)
    results = {}
    try:
        results["raylite"] = run_raylite(base, app_dir, args.calls)
        print(json.dumps({"system": "raylite", **results["raylite"]}), flush=True)
        if os.access(os.path.join(args.ray_venv, "bin", "ray"), os.X_OK):
            results["ray"] = run_ray(base, app_dir, args.calls, args.ray_venv)
            print(json.dumps({"system": "ray", **results["ray"]}), flush=True)
        else:
            print(f"Ray not found in {args.ray_venv}: raylite only")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    names = list(results)
    print(f"\n{'metric':28s}" + "".join(f"{n:>14s}" for n in names))
    for key in results["raylite"]:
        print(f"{key:28s}" + "".join(f"{str(results[n].get(key, '-')):>14s}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
