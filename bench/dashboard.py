"""Dashboard and metrics cost: raylite and Ray side by side, in one run.

    python bench/dashboard.py                  # raylite, and Ray from /opt/rayvenv when present
    python bench/dashboard.py --no-ray --runs 3

What it measures, each in a fresh interpreter (a second init() in one process is warm):
- init() with the dashboard on and off, and the difference (issue 13: at most 50 ms);
- process-tree PSS after init with it off, on and idle, and on after the page and /metrics
  were used (raylite starts its HTTP server on the first request), and the difference
  between on-and-used and off (issue 13: at most 50 MiB);
- one /metrics scrape (Ray: its metrics agent's port) and one `Counter.inc()` of the
  framework's `util.metrics`.
Numbers are medians over --runs. Workers print JSON lines; the parent prints the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402  (this folder is not a package)
    MIB,
    Metric,
    collect_worker_metrics,
    emit,
    median,
    render_table,
    sample,
    tree_memory,
)

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
SETTLE_S = 3.0

METRICS = [
    Metric("init_off_s", "init(), dashboard off", "s", True),
    Metric("init_on_s", "init(), dashboard on", "s", True),
    Metric("dashboard_init_ms", "init() cost of the dashboard (on - off)", "ms", True, 50),
    Metric("pss_off_mib", "process tree PSS, dashboard off", "MiB", True),
    Metric("pss_on_idle_mib", "process tree PSS, dashboard on, unused", "MiB", True),
    Metric("pss_on_used_mib", "process tree PSS, dashboard on, page and /metrics used", "MiB", True),
    Metric("dashboard_pss_mib", "memory cost of the dashboard (used - off)", "MiB", True, 50),
    Metric("scrape_ms", "one /metrics scrape", "ms", True),
    Metric("counter_inc_us", "util.metrics Counter.inc()", "us", True),
]


# ------------------------------------------------------------------ worker side (one framework)
def _framework(name: str):
    if name == "raylite":
        import raylite

        return raylite
    import ray

    return ray


def _get(url: str, headers: dict[str, str]) -> float:
    import urllib.request

    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        r.read()
    return time.perf_counter() - start


def probe(name: str, mode: str) -> None:
    """One init() in this fresh interpreter: mode off | on | used."""
    fw = _framework(name)
    kwargs: dict = {"num_cpus": 2, "include_dashboard": mode != "off"}
    port = 0
    if name == "ray" and mode == "used":
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        kwargs["_metrics_export_port"] = port
    start = time.perf_counter()
    ctx = fw.init(**kwargs)
    init_s = time.perf_counter() - start
    emit({"framework": name, "metric": f"init_{'off' if mode == 'off' else 'on'}_s", "value": init_s})
    if mode == "used":
        base = "http://" + str(ctx.dashboard_url)
        headers = {}
        if name == "raylite":
            from raylite import api

            headers = {"Authorization": f"Bearer {api.ensure_initialized().token}"}
            for path in ("/", "/api/dashboard/overview", "/api/dashboard/nodes", "/metrics"):
                _get(base + path, headers)
            scrape = [_get(base + "/metrics", headers) for _ in range(5)]
        else:
            for path in ("/", "/api/cluster_status"):
                try:  # best effort: on a shared machine 8265 may be someone else's server
                    _get(base + path, headers)
                except OSError as e:
                    emit({"framework": name, "metric": "error", "error": f"GET {base}{path}: {e}"})
            scrape = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(scrape) < 5:
                try:
                    scrape.append(_get(f"http://127.0.0.1:{port}/metrics", headers))
                except OSError:
                    time.sleep(0.5)  # Ray's metrics agent starts after init() returns
        if scrape:
            emit({"framework": name, "metric": "scrape_ms", "value": median(scrape) * 1000})
    time.sleep(SETTLE_S)
    mem = tree_memory(os.getpid())
    key = {"off": "pss_off_mib", "on": "pss_on_idle_mib", "used": "pss_on_used_mib"}[mode]
    if mem.pss_bytes is not None:
        emit({"framework": name, "metric": key, "value": mem.pss_bytes / MIB})
    if mode == "off":
        counter = _metrics_module(name).Counter("bench_requests", "bench", tag_keys=("route",))
        times = sample(lambda: counter.inc(1.0, tags={"route": "/"}), 20_000, 3.0)
        emit({"framework": name, "metric": "counter_inc_us", "value": median(times) * 1e6})
    fw.shutdown()


def _metrics_module(name: str):
    if name == "raylite":
        from raylite.util import metrics
    else:
        from ray.util import metrics
    return metrics


# ------------------------------------------------------------------ parent
def run_framework(name: str, python: str, runs: int) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for _ in range(runs):
        for mode in ("off", "on", "used"):
            cmd = [python, os.path.abspath(__file__), "--worker", name, "--mode", mode]
            got = collect_worker_metrics(name, cmd, {m.name for m in METRICS}, timeout_s=180)
            for k, v in got.items():
                values.setdefault(k, []).append(v)
    out = {k: median(v) for k, v in values.items()}
    if "init_on_s" in out and "init_off_s" in out:
        out["dashboard_init_ms"] = max(0.0, (out["init_on_s"] - out["init_off_s"]) * 1000)
    if "pss_on_used_mib" in out and "pss_off_mib" in out:
        out["dashboard_pss_mib"] = out["pss_on_used_mib"] - out["pss_off_mib"]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=["raylite", "ray"])
    p.add_argument("--mode", choices=["off", "on", "used"], default="off")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--only-ray", action="store_true", help="measure Ray alone (to rerun its side)")
    args = p.parse_args()
    if args.worker:
        probe(args.worker, args.mode)
        return
    results = {} if args.only_ray else {"raylite": run_framework("raylite", sys.executable, args.runs)}
    frameworks = [] if args.only_ray else ["raylite"]
    if not args.no_ray and os.path.exists(args.ray_python):
        results["ray"] = run_framework("ray", args.ray_python, args.runs)
        frameworks.append("ray")
    print(render_table(METRICS, results, frameworks), file=sys.stderr)


if __name__ == "__main__":
    main()
