"""Libraries built on Ray, on raylite and on Ray, side by side (the docs/ecosystem.md table).

    python bench/ecosystem.py [--repeats 3] [--cpus 2] [--ray-python /opt/rayvenv/bin/python]
                              [--only modin_on_ray,daft_on_ray,...] [--json out.json] [--markdown]

Each program in examples/ecosystem runs in a fresh interpreter: its Ray mode under this Python
(`import ray` is raylite through compat/ray) and under Ray's virtualenv (the same library
versions installed there), alternately, --repeats times each; its native mode once, as the
reference its results must equal. Figures are medians: `work` is the library program itself,
`init` is `ray.init()` (plus the library's engine start), `wall` the whole process. Ray's side is
skipped, saying why, when its virtualenv is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO / "examples" / "ecosystem"
_SESSIONS = tempfile.mkdtemp(prefix="raylite-bench-ecosystem-")
ALL = ["multiprocessing_pool", "joblib_sklearn", "dask_on_ray", "modin_on_ray", "daft_on_ray", "hamilton_on_ray"]
LIBRARIES = {"multiprocessing_pool": [],  # the standard library's API
             "joblib_sklearn": ["joblib", "scikit-learn"], "dask_on_ray": ["dask"],
             "modin_on_ray": ["modin"], "daft_on_ray": ["daft"], "hamilton_on_ray": ["apache-hamilton"]}


def _env(python: str) -> dict[str, str]:
    env = dict(os.environ, RAYLITE_DASHBOARD_PORT="0", RAY_USAGE_STATS_ENABLED="0")
    if python == sys.executable:  # this checkout's raylite, behind compat/ray's `import ray`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env["RAYLITE_TEMP_DIR"] = _SESSIONS  # its own cluster, never one `raylite start` left running
    else:
        env.pop("PYTHONPATH", None)
    return env


def run_once(python: str, program: str, mode: str, cpus: int) -> dict:
    """One fresh process; its JSON line plus `wall_s`, or {"error": ...}."""
    start = time.perf_counter()
    proc = subprocess.run([python, str(PROGRAMS / f"{program}.py"), mode, "--cpus", str(cpus)],
                          capture_output=True, text=True, env=_env(python), cwd="/tmp", timeout=900)
    wall_s = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]}
    return {**json.loads(lines[-1]), "wall_s": wall_s}


def versions(python: str, modules: list[str]) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for d in sys.argv[1:]:\n"
            "    try: out[d] = m.version(d)\n"
            "    except m.PackageNotFoundError: out[d] = 'missing'\n"
            "print(json.dumps(out))")
    proc = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=_env(python))
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def summarize(runs: list[dict], reference: dict) -> dict:
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"status": "FAIL: " + runs[0]["error"] if runs else "not run"}
    same = all(r["result"] == reference.get("result") for r in good)
    return {"status": ("ok" if same else "RESULTS DIFFER") if len(good) == len(runs) else "FAIL: " + next(
                r["error"] for r in runs if "error" in r),
            "work_s": median([r["work_s"] for r in good]), "init_s": median([r["init_s"] for r in good]),
            "wall_s": median([r["wall_s"] for r in good]), "backend": good[0]["ray_backend"],
            "runs": len(good)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--ray-python", default=os.path.join(
        os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv"), "bin", "python"))
    parser.add_argument("--only", default=",".join(ALL))
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--markdown", action="store_true", help="print the docs table rows too")
    args = parser.parse_args()
    ray_python = args.ray_python if os.path.exists(args.ray_python) else None
    if ray_python is None:
        print(f"Ray's side skipped: no interpreter at {args.ray_python} (set --ray-python or RAYLITE_TEST_RAY_VENV)")
    report = []
    for program in args.only.split(","):
        native = run_once(sys.executable, program, "native", args.cpus)
        runs: dict[str, list[dict]] = {"raylite": [], "ray": []}
        for _ in range(args.repeats):  # alternate, so load on the machine falls on both alike
            runs["raylite"].append(run_once(sys.executable, program, "ray", args.cpus))
            if ray_python:
                runs["ray"].append(run_once(ray_python, program, "ray", args.cpus))
        dists = LIBRARIES[program]
        row = {"program": program, "native": summarize([native], native),
               "raylite": summarize(runs["raylite"], native),
               "ray": summarize(runs["ray"], native) if ray_python else {"status": "skipped"},
               "versions": versions(sys.executable, dists),
               "ray_versions": versions(ray_python, [*dists, "ray"]) if ray_python else {}}
        report.append(row)
        print(_line(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if args.markdown:
        print("\n| program | raylite work / wall (s) | Ray 2.60 work / wall (s) | native work (s) |")
        print("|---|---|---|---|")
        for row in report:
            print(f"| {row['program']} | {_fig(row['raylite'])} | {_fig(row['ray'])} | "
                  f"{row['native'].get('work_s', float('nan')):.2f} |")


def _fig(s: dict) -> str:
    return f"{s['work_s']:.2f} / {s['wall_s']:.2f}" if "work_s" in s and s["status"] == "ok" else s["status"]


def _line(row: dict) -> str:
    return (f"{row['program']:22s} raylite: {_fig(row['raylite']):>16s} [{row['raylite']['status']}]   "
            f"ray: {_fig(row['ray']):>16s} [{row['ray']['status']}]   native work: "
            f"{row['native'].get('work_s', float('nan')):.2f}s   versions {row['versions']}")


if __name__ == "__main__":
    main()
