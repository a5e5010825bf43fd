"""What KubeRay's probes and init container cost: `ray health-check` (the worker's init container
has 200m CPU / 256 MiB) and the node health server's answer time, raylite and Ray side by side.

    python3 bench/kuberay.py [--runs 5] [--ray-venv /opt/rayvenv]

For each `ray` command: wall time, CPU time and peak RSS of one `ray health-check --address
HOST:PORT` against a live head and against an address where nothing listens; and the median
and p99 of 200 GETs of /api/local_raylet_healthz on raylite's health server. The raylite head
is started here (`raylite start --head --dashboard-agent-listen-port=...`); Ray's head is
started only with --with-ray-head (it costs about 2 GiB and 10 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit code) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def raylite_ray_command() -> list[str]:
    compat = os.path.join(ROOT, "compat", "ray", "src")
    if os.path.exists(os.path.join(compat, "ray", "__init__.py")):
        return [sys.executable, "-c", "import sys, ray; sys.argv[0] = 'ray'; sys.exit(ray._cli_main())"]
    return [sys.executable, "-m", "raylite.cli"]


def report(name: str, runs: list[tuple[float, float, float, int]]) -> None:
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    rss = max(r[2] for r in runs)
    codes = sorted({r[3] for r in runs})
    print(f"{name:<58} wall {wall:6.2f} s  cpu {cpu:5.2f} s  peak RSS {rss:6.1f} MiB  exit {codes}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ray-venv", default=os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv"))
    ap.add_argument("--with-ray-head", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_kuberay_")
    env = {**os.environ, "RAYLITE_TEMP_DIR": tmp, "PYTHONPATH": os.pathsep.join(
        [os.path.join(ROOT, "compat", "ray", "src"), ROOT, os.environ.get("PYTHONPATH", "")])}
    port, agent = free_port(), free_port()
    subprocess.run([sys.executable, "-m", "raylite.cli", "start", "--head", f"--port={port}", "--num-cpus=1",
                    f"--dashboard-agent-listen-port={agent}", "--include-dashboard=false"],
                   env=env, check=True, capture_output=True)
    dead = f"127.0.0.1:{free_port()}"
    try:
        ours = raylite_ray_command()
        report("raylite: ray health-check (live head)",
               [measure([*ours, "health-check", "--address", f"127.0.0.1:{port}"], env) for _ in range(args.runs)])
        report("raylite: ray health-check (nothing listening)",
               [measure([*ours, "health-check", "--address", dead], env) for _ in range(args.runs)])
        ray_bin = os.path.join(args.ray_venv, "bin", "ray")
        if os.path.exists(ray_bin):
            renv = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            report("Ray: ray health-check (nothing listening)",
                   [measure([ray_bin, "health-check", "--address", dead], renv) for _ in range(min(args.runs, 2))])
            if args.with_ray_head:
                rport = free_port()
                subprocess.run([ray_bin, "start", "--head", f"--port={rport}", "--num-cpus=1",
                                "--include-dashboard=false"], env=renv, check=True, capture_output=True)
                try:
                    report("Ray: ray health-check (live head)",
                           [measure([ray_bin, "health-check", "--address", f"127.0.0.1:{rport}"], renv)
                            for _ in range(args.runs)])
                finally:
                    subprocess.run([ray_bin, "stop", "--force"], env=renv, capture_output=True)
        else:
            print(f"(Ray not found at {ray_bin}: its figures are left out)")
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{agent}/api/local_raylet_healthz", timeout=5) as r:
                assert r.read() == b"success"
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"raylite: GET /api/local_raylet_healthz x200: median {statistics.median(times) * 1e3:.2f} ms, "
              f"p99 {times[197] * 1e3:.2f} ms")
    finally:
        subprocess.run([sys.executable, "-m", "raylite.cli", "stop"], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
