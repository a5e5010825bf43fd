"""Run Ray's own pytest modules, unmodified, on Ray 2.60 and on raylite; compare them test by test.

    python bench/conformance_tests.py --work /tmp/conformance --results /tmp/conformance/tests.json
    python bench/conformance_tests.py --side raylite --reuse-ray --only test_cancel.py

Ray's test files never enter this repository: they are read from a git directory of Ray's
repository (`--ray-git`, a bare clone; `--rev`, HEAD by default) into `--work/<side>/`, beside
the harness of bench/conformance_suite/ (a conftest.py with Ray's fixtures written against the
public API, and stand-ins for Ray's test-only helpers). Each module then runs in its own pytest
process, with Ray's interpreter (`--ray-python`, the extra site directory `--ray-extra` first on
PYTHONPATH for test dependencies the Ray venv lacks) and with raylite's (this worktree and its
compat/ray first on PYTHONPATH, so `import ray` is raylite; its own RAYLITE_TEMP_DIR, stopped
afterwards). Per-test outcomes come from pytest's JUnit XML; `--results` keeps them as JSON and
the summary table (module, tests, passed on Ray, of those passed on raylite) goes to stdout.
Only a test that passes on Ray counts: the target is that each of those passes on raylite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = Path(__file__).resolve().parent / "conformance_suite"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance import _kill_tree, stop_raylite  # noqa: E402  (this folder is not a package)

MODULES = [
    "python/ray/tests/test_basic.py", "python/ray/tests/test_basic_2.py", "python/ray/tests/test_actor.py",
    "python/ray/tests/test_generators.py", "python/ray/tests/test_cancel.py", "python/ray/tests/test_actor_cancel.py",
    "python/ray/tests/test_concurrency_group.py", "python/ray/tests/test_runtime_context.py",
    "python/ray/tests/test_get_or_create_actor.py", "python/ray/tests/test_queue.py",
    "python/ray/tests/test_actor_pool.py", "python/ray/serve/tests/test_batching.py",
]


def fetch_module(git_dir: str, rev: str, path: str, dest: Path) -> Path:
    """Write Ray's file `path` at `rev` into `dest` (named by its basename), the harness beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    target = dest / Path(path).name
    target.write_text(text)
    for helper in SUITE.glob("*.py"):
        shutil.copy(helper, dest / helper.name)
    return target


def parse_junit(xml_path: Path) -> dict[str, dict[str, str]]:
    """test id -> {"outcome": passed|failed|error|skipped, "message": first line of the reason}."""
    outcomes: dict[str, dict[str, str]] = {}
    if not xml_path.exists():
        return outcomes
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("name", "")
        classname = case.get("classname", "")
        cls = classname.split(".")[-1] if classname.split(".")[-1][:1].isupper() else ""
        test_id = f"{cls}::{name}" if cls else name
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or (node.text or "")).strip().splitlines()[0:1]
                message = message[0][:300] if message else ""
                break
        if outcome == "error" and test_id in outcomes:  # a teardown error after a pass
            outcomes[test_id + "[teardown]"] = {"outcome": outcome, "message": message}
            continue
        outcomes[test_id] = {"outcome": outcome, "message": message}
    return outcomes


def run_module(python: str, module: Path, env: dict[str, str], test_timeout_s: int, module_timeout_s: int,
               extra: list[str]) -> tuple[dict[str, dict[str, str]], str, float]:
    xml_path = module.with_suffix(".junit.xml")
    xml_path.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", module.name, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--timeout={test_timeout_s}", f"--junitxml={xml_path.name}", "-o", "asyncio_mode=auto",
           "-o", "junit_family=xunit1", *extra]
    start = time.monotonic()
    with open(module.with_suffix(".log"), "w+b") as out:
        proc = subprocess.Popen(cmd, cwd=module.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=module_timeout_s)
        except subprocess.TimeoutExpired:
            pass
        _kill_tree(proc)
        proc.wait()
        out.seek(0)
        tail = out.read().decode("utf-8", "replace")[-3000:]
    return parse_junit(xml_path), tail, round(time.monotonic() - start, 1)


# what the harness itself needs in each side's interpreter (Ray's venv lacks them: see --ray-extra)
HARNESS_NEEDS = ("pytest", "pytest_timeout", "pytest_asyncio")


def missing_harness_modules(python: str, env: dict[str, str]) -> list[str]:
    """The modules of HARNESS_NEEDS that `python` cannot import with `env` (its PYTHONPATH)."""
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    out = subprocess.run([python, "-c", probe, *HARNESS_NEEDS], env=env, capture_output=True, text=True, timeout=60)
    if out.returncode:
        return list(HARNESS_NEEDS)
    return out.stdout.split()


def harness_problem(side: str, python: str, env: dict[str, str], extra_dir: str) -> str:
    """"" when `side` can run the modules, else what to install and where (run before any module:
    without pytest a side reports no verdicts at all, and without pytest-asyncio every async test
    fails, on either side)."""
    missing = missing_harness_modules(python, env)
    if not missing:
        return ""
    packages = " ".join(m.replace("_", "-") for m in missing)
    pip = f"{Path(python).parent / 'pip'}" if (Path(python).parent / "pip").exists() else f"{python} -m pip"
    return (f"the {side} side's interpreter ({python}) cannot import {', '.join(missing)}. Install them into the "
            f"extra site directory this harness puts on its PYTHONPATH:\n    {pip} install --target {extra_dir} {packages}")


def side_env(side: str, args: argparse.Namespace, temp_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLITE_", "PYTHONPATH"))}
    env["CONFORMANCE_SIDE"] = side
    if side == "ray":
        env["PYTHONPATH"] = args.ray_extra
        env["PATH"] = f"{Path(args.ray_python).parent}:{env.get('PATH', '')}"
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["RAY_TMPDIR"] = str(temp_dir)
    else:
        env["PYTHONPATH"] = ":".join([str(REPO / "compat" / "ray" / "src"), str(REPO), args.lite_extra])
        env["RAYLITE_TEMP_DIR"] = str(temp_dir)
    return env


def summarize(results: dict) -> str:
    lines = [f"{'module':<28} {'tests':>5} {'ray pass':>8} {'raylite pass':>12} {'of ray pass':>11}"]
    totals = [0, 0, 0, 0]
    for module, tests in results.items():
        ray_pass = {t for t, v in tests.items() if v.get("ray", {}).get("outcome") == "passed"}
        lite_pass = {t for t, v in tests.items() if v.get("raylite", {}).get("outcome") == "passed"}
        row = [len(tests), len(ray_pass), len(lite_pass), len(ray_pass & lite_pass)]
        totals = [a + b for a, b in zip(totals, row)]
        lines.append(f"{module:<28} {row[0]:>5} {row[1]:>8} {row[2]:>12} {row[3]:>11}")
    lines.append(f"{'total':<28} {totals[0]:>5} {totals[1]:>8} {totals[2]:>12} {totals[3]:>11}")
    lines.append("")
    for module, tests in results.items():
        for test, v in sorted(tests.items()):
            if v.get("ray", {}).get("outcome") == "passed" and v.get("raylite", {}).get("outcome") != "passed":
                lite = v.get("raylite", {})
                lines.append(f"  {module}::{test}: {lite.get('outcome', 'not run')}: {lite.get('message', '')[:160]}")
    return "\n".join(lines)


def markdown_table(results: dict) -> str:
    """module | tests | passed on Ray | of those, passed on raylite (for docs/conformance.md)."""
    rows = ["| module | tests | pass on Ray 2.60 | of those, pass on raylite |", "| --- | ---: | ---: | ---: |"]
    for module, tests in results.items():
        ray_pass = {t for t, v in tests.items() if v.get("ray", {}).get("outcome") == "passed"}
        both = {t for t in ray_pass if tests[t].get("raylite", {}).get("outcome") == "passed"}
        rows.append(f"| {module} | {len(tests)} | {len(ray_pass)} | {len(both)} |")
    return "\n".join(rows)


def merge(paths: list[str]) -> dict:
    """Verdicts of several results files (Ray's side from one, raylite's from another) as one."""
    merged: dict = {}
    for path in paths:
        for module, tests in json.loads(Path(path).read_text()).items():
            for test, sides in tests.items():
                merged.setdefault(module, {}).setdefault(test, {}).update(sides)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray-git", default="/work/.mirror/dayshah+ray/repo")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--modules", nargs="*", default=MODULES, help="paths inside Ray's repository")
    parser.add_argument("--only", nargs="*", default=None, help="basenames of modules to (re)run")
    parser.add_argument("--work", default="/tmp/conformance")
    parser.add_argument("--side", choices=["ray", "raylite", "both"], default="both")
    parser.add_argument("--ray-python", default="/opt/rayvenv/bin/python")
    parser.add_argument("--ray-extra", default="/tmp/conformance/rayextra",
                        help="site directory with pytest-timeout, pytest-asyncio, httpx, psutil for Ray's venv")
    parser.add_argument("--lite-extra", default="/tmp/conformance/litextra",
                        help="site directory with pytest-asyncio for raylite's interpreter")
    parser.add_argument("--results", default="/tmp/conformance/tests.json")
    parser.add_argument("--test-timeout", type=int, default=120)
    parser.add_argument("--module-timeout", type=int, default=1800)
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--report", nargs="+", metavar="RESULTS",
                        help="run nothing: merge these results files and print the summary and a Markdown table")
    args = parser.parse_args(argv)
    if args.report:
        merged = merge(args.report)
        print(summarize(merged))
        print()
        print(markdown_table(merged))
        return 0

    results_path = Path(args.results)
    results: dict = json.loads(results_path.read_text()) if results_path.exists() else {}
    sides = ["ray", "raylite"] if args.side == "both" else [args.side]
    extra = ["-k", args.k] if args.k else []
    for side in sides:
        problem = harness_problem(side, args.ray_python if side == "ray" else sys.executable,
                                  side_env(side, args, Path(tempfile.gettempdir())),
                                  args.ray_extra if side == "ray" else args.lite_extra)
        if problem:
            print(f"conformance_tests: {problem}", file=sys.stderr)
            return 2
    for path in args.modules:
        name = Path(path).name
        if args.only and name not in args.only:
            continue
        module_results = results.setdefault(name, {})
        for side in sides:
            with tempfile.TemporaryDirectory(prefix=f"conf-{side}-") as temp_dir:
                module = fetch_module(args.ray_git, args.rev, path, Path(args.work) / side / Path(path).parent.name)
                env = side_env(side, args, Path(temp_dir))
                python = args.ray_python if side == "ray" else sys.executable
                outcomes, tail, seconds = run_module(python, module, env, args.test_timeout,
                                                     args.module_timeout, extra)
                if side == "raylite":
                    stop_raylite(python, env)
            if not outcomes:
                outcomes = {"<collection>": {"outcome": "error", "message": tail[-300:]}}
            for test in list(module_results):  # a re-run replaces this side's verdicts
                if not args.k:
                    module_results[test].pop(side, None)
            for test, verdict in outcomes.items():
                module_results.setdefault(test, {})[side] = verdict
            passed = sum(v["outcome"] == "passed" for v in outcomes.values())
            print(f"{name} on {side}: {passed}/{len(outcomes)} passed in {seconds}s", flush=True)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(summarize(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
