"""Run a directory of Ray example scripts on Ray and on raylite, side by side; report which pass.

The conformance suite is Ray's own documentation examples (`doc/source/<lib>/doc_code/*.py` in
ray-project/ray), run unchanged. They are Ray's code, so they never enter this repository: keep
them in a directory outside it and point this runner at it. Each example runs in a fresh process,
in its own directory (examples read their sibling files), with a time limit, first on Ray (an
interpreter with Ray installed, `--ray-python`) and then on raylite through a shim directory
(`--shim`) whose `ray` package aliases `ray`, `ray.serve`, ... to the `raylite` modules.

    python bench/serve_conformance.py /work/conformance/serve/examples \
        --shim /work/conformance/shim --results /work/conformance/serve/results.json

An example counts for raylite only when it passes on Ray here (exit status 0 within the limit):
examples that need a GPU, a download or a package Ray's environment lacks fail on Ray and are
listed as such. Ray's results are cached in the results file by the example's content hash, so a
rerun only runs raylite (`--rerun-ray` forces Ray again). `--only` picks examples by substring.
The summary is printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the example and everything it started (Ray's and raylite's daemons included)."""
    try:
        import psutil

        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
    except ImportError:  # pragma: no cover
        children = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in children:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


def run_one(python: str, script: Path, env: dict, timeout_s: float) -> dict:
    """Run `script` with `python` in its directory; {"ok", "rc", "secs", "tail"}."""
    start = time.monotonic()
    proc = subprocess.Popen([python, script.name], cwd=script.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        out, _ = proc.communicate()
        rc = "timeout"
    else:
        _kill_tree(proc)  # daemons an example left behind
    text = out.decode("utf-8", "replace")
    return {"ok": rc == 0, "rc": rc, "secs": round(time.monotonic() - start, 1), "tail": text[-3000:]}


def _reason(result: dict) -> str:
    """The line that says why a run failed: the last exception line, else the last line."""
    if result["rc"] == "timeout":
        return f"timed out after {result['secs']}s"
    lines = [ln.strip() for ln in result["tail"].splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Exit")) or head in ("AssertionError", "KeyboardInterrupt"):
            return ln[:300]
    return lines[-1][:300] if lines else f"exit status {result['rc']}"


def _envs(shim: Path, temp_dir: str) -> tuple[dict, dict]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLITE_")) and k != "PYTHONPATH"}
    ray_env = {**base, "RAY_USAGE_STATS_ENABLED": "0"}
    lite_env = {**base, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)]), "RAYLITE_TEMP_DIR": temp_dir}
    return ray_env, lite_env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("examples", type=Path, help="directory of example scripts (searched recursively)")
    p.add_argument("--shim", type=Path, required=True, help="directory holding the `ray` -> raylite alias package")
    p.add_argument("--ray-python", default="/opt/rayvenv/bin/python", help="interpreter with Ray installed")
    p.add_argument("--python", default=sys.executable, help="interpreter for the raylite runs")
    p.add_argument("--results", type=Path, help="JSON file of results (read for Ray's cache, then rewritten)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per example and per system")
    p.add_argument("--only", action="append", default=[], help="run only examples whose path contains this")
    p.add_argument("--rerun-ray", action="store_true", help="run Ray again even when a cached result exists")
    p.add_argument("--ray-only", action="store_true", help="run (or reuse) Ray's results only")
    p.add_argument("--temp-dir", default=os.environ.get("RAYLITE_TEMP_DIR", "/tmp/raylite-conformance"))
    args = p.parse_args(argv)

    results: dict = {}
    if args.results and args.results.exists():
        results = json.loads(args.results.read_text())
    ray_env, lite_env = _envs(args.shim.resolve(), args.temp_dir)
    scripts = sorted(s for s in args.examples.rglob("*.py") if not s.name.startswith("_"))
    if args.only:
        scripts = [s for s in scripts if any(o in str(s) for o in args.only)]
    for script in scripts:
        key = str(script.relative_to(args.examples))
        digest = hashlib.sha1(script.read_bytes()).hexdigest()
        entry = results.get(key, {})
        if args.rerun_ray or entry.get("sha") != digest or "ray" not in entry:
            entry = {"sha": digest, "ray": run_one(args.ray_python, script, ray_env, args.timeout)}
        if args.ray_only:
            pass
        elif entry["ray"]["ok"]:
            entry["raylite"] = run_one(args.python, script, lite_env, args.timeout)
        else:
            entry.pop("raylite", None)
        results[key] = entry
        lite = entry.get("raylite")
        print(f"{key:60s} ray={'ok' if entry['ray']['ok'] else 'FAIL'} "
              f"raylite={'-' if lite is None else ('ok' if lite['ok'] else 'FAIL')}"
              f"{'' if lite is None or lite['ok'] else '  ' + _reason(lite)}", flush=True)
        if args.results:
            args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    print()
    print(summary(results))
    return 0


def summary(results: dict) -> str:
    """The Markdown summary: counts, then each example that fails on raylite with its reason."""
    ran = {k: v for k, v in results.items() if v["ray"]["ok"]}
    passed = [k for k, v in ran.items() if v.get("raylite", {}).get("ok")]
    lines = [f"Ran on Ray: {len(ran)} of {len(results)}; of those, pass on raylite: {len(passed)}.", "",
             "| example | raylite | reason |", "| --- | --- | --- |"]
    for k in sorted(ran):
        lite = ran[k].get("raylite")
        ok = bool(lite and lite["ok"])
        lines.append(f"| {k} | {'pass' if ok else 'FAIL'} | {'' if ok or not lite else _reason(lite)} |")
    not_ray = sorted(k for k in results if k not in ran)
    if not_ray:
        lines += ["", "Not run on raylite (they fail on Ray here): "
                  + ", ".join(f"{k} ({_reason(results[k]['ray'])})" for k in not_ray)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
