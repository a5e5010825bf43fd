"""Run directories of Ray programs on Ray and on raylite, and tell which ones raylite runs too.

    python bench/conformance.py /work/conformance/core /work/conformance/data \\
        --ray-python /opt/rayvenv/bin/python --results /tmp/conformance.json
    python bench/conformance.py serve=/work/conformance/serve/examples --recursive --siblings \\
        --results /tmp/serve-conformance.json

Each `*.py` file (or `*.rst` page, run as its `.. testcode::` blocks) in each directory is one
example (files whose name starts with `_` are helpers, not examples), run unchanged in a fresh
process and a fresh temporary working directory, first with Ray's interpreter, then (when it
passed on Ray) with raylite's interpreter and `import ray` pointing at raylite. A directory is
named by its last component, or `NAME=DIR` names it. `--recursive` takes the examples of
subdirectories too (named by their path, e.g. `http_guide/streaming_example.py`);
`--siblings` copies the example's directory (files and subdirectories) into its working
directory first, for examples that import a sibling module or read a sibling file (Serve's). An example "runs" when it exits 0
within the time limit. The aliasing is compat/ray (the `ray` distribution users install) or, with
`--alias shim`, a small shim package written at run time (see
`write_shim`): `ray`, `ray.util`, `ray.data`, ... resolve to `raylite`, `raylite.util`,
`raylite.data`, ..., and a `ray` command on PATH runs raylite's CLI. Nothing of Ray's code is
needed by this script; the examples live wherever the caller keeps them (outside this repo).

A directory may hold `SKIP.txt` with lines `name.py: reason` for examples that must not run
here (for instance ones that would stop every Ray cluster on a shared machine); they are listed
in the summary with their reason. `--reuse-ray` keeps Ray's verdicts from an earlier results
file, so a second run only re-runs raylite (a verdict is reused only while the example's
content is what it was: each verdict records the file's SHA-1). The summary (one table per directory, then each
failure with the tail of its output) goes to stdout; `--results` saves every verdict as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from docstring_examples import testcode_blocks  # noqa: E402  (this folder is not a package)

_SHIM_INIT = '''"""`import ray` -> raylite: written by bench/conformance.py for running Ray programs unchanged."""
import importlib
import importlib.abc
import importlib.util
import sys

import raylite


class _RayAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve `ray.X.Y` to the module `raylite.X.Y` (the same object, not a copy)."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("ray."):
            return None
        real = "raylite." + name[len("ray."):]
        try:
            if importlib.util.find_spec(real) is None:
                return None
        except ModuleNotFoundError:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        real = importlib.import_module("raylite." + module.__name__[len("ray."):])
        sys.modules[module.__name__] = real


sys.meta_path.insert(0, _RayAlias())
sys.modules["ray"] = raylite
'''

_SHIM_CLI = '''#!/bin/sh
exec "{python}" -m raylite.cli "$@"
'''


_COMPAT_CLI = """#!/bin/sh
exec "{python}" -c 'import sys; sys.argv[0] = "ray"; import ray; ray._cli_main()' "$@"
"""


def write_shim(shim_dir: Path, python: str, alias: str = "shim") -> Path:
    """Write the `ray` alias package (alias "shim") and a `ray` command into `shim_dir`; return it.

    With alias "compat" no package is written: compat/ray (the distribution users install) is
    put on PYTHONPATH instead (see raylite_env), and the command runs its `ray` entry point."""
    if alias == "shim":
        (shim_dir / "ray").mkdir(parents=True, exist_ok=True)
        (shim_dir / "ray" / "__init__.py").write_text(_SHIM_INIT)
    (shim_dir / "bin").mkdir(parents=True, exist_ok=True)
    cli = shim_dir / "bin" / "ray"
    cli.write_text((_SHIM_CLI if alias == "shim" else _COMPAT_CLI).format(python=python))
    cli.chmod(0o755)
    return shim_dir


@dataclass
class Run:
    """One example run on one framework."""

    ok: bool
    returncode: int | None
    seconds: float
    timed_out: bool
    tail: str


@dataclass
class Verdict:
    """One example: where it lives, its Ray run, and (when Ray passed) its raylite run."""

    library: str
    name: str
    sha: str = ""  # SHA-1 of the example's file: Ray's verdict is reused only for the same content
    skipped: str = ""
    ray: Run | None = None
    raylite: Run | None = None
    notes: list[str] = field(default_factory=list)


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the example's process group, and (while it still runs) every descendant, daemons
    that left the group included."""
    children = []
    try:
        import psutil

        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    except ImportError:  # pragma: no cover - the group alone
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in children:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass


def rst_testcode(text: str) -> str:
    """The `.. testcode::` blocks of a reStructuredText page joined into one program, as Sphinx's
    doctest runs them (one namespace per page); blocks marked `:skipif: True` are left out."""
    return "\n".join(testcode_blocks(text))


def run_one(python: str, script: Path, env: dict[str, str], timeout_s: float, siblings: bool = False) -> Run:
    """Run `script` with `python` in a fresh temporary directory; kill its process tree at the limit.
    A `.rst` page runs as the program made of its testcode blocks. `siblings`: the directory
    starts as a copy of the script's own directory."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as cwd:
        if siblings:
            shutil.copytree(script.parent, cwd, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "SKIP.txt"))
        if script.suffix == ".rst":
            target = Path(cwd) / (script.stem.replace("-", "_") + "_rst.py")
            target.write_text(rst_testcode(script.read_text()))
        else:
            target = Path(cwd) / script.name
            shutil.copy(script, target)
        start = time.monotonic()
        with open(Path(cwd) / ".output", "w+b") as out:
            proc = subprocess.Popen([python, str(target)], cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_tree(proc)
            proc.wait()
            seconds = time.monotonic() - start
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
    rc = None if timed_out else proc.returncode
    return Run(ok=rc == 0, returncode=rc, seconds=round(seconds, 1), timed_out=timed_out,
               tail=text[-2500:])


def ray_env(ray_python: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYLITE_", "PYTHONPATH"))}
    env["PATH"] = f"{Path(ray_python).parent}:{env.get('PATH', '')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def raylite_env(shim: Path, raylite_root: Path, temp_dir: Path, alias: str = "shim") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PYTHONPATH"))}
    first = shim if alias == "shim" else raylite_root / "compat" / "ray" / "src"
    env["PYTHONPATH"] = f"{first}:{raylite_root}"
    env["PATH"] = f"{shim / 'bin'}:{env.get('PATH', '')}"
    env["RAYLITE_TEMP_DIR"] = str(temp_dir)
    return env


def stop_raylite(python: str, env: dict[str, str]) -> None:
    """Stop whatever cluster an example left behind under its own RAYLITE_TEMP_DIR."""
    subprocess.run([python, "-m", "raylite.cli", "stop", "--force"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)


def find_examples(directory: Path, recursive: bool) -> list[Path]:
    """The examples of `directory` (subdirectories too when `recursive`), helpers (`_*`) left out."""
    pattern = "**/*" if recursive else "*"
    found = [*directory.glob(pattern + ".py"), *directory.glob(pattern + ".rst")]
    return sorted(p for p in found if not p.name.startswith("_") and "__pycache__" not in p.parts)


def named_directory(arg: str) -> tuple[str, Path]:
    """`NAME=DIR` or `DIR` (named by its last component)."""
    name, sep, path = arg.partition("=")
    if sep and name and "/" not in name:
        return name, Path(path)
    return Path(arg).name, Path(arg)


def file_sha(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def read_skips(directory: Path) -> dict[str, str]:
    skips: dict[str, str] = {}
    path = directory / "SKIP.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            if ":" in line and not line.lstrip().startswith("#"):
                name, reason = line.split(":", 1)
                skips[name.strip()] = reason.strip()
    return skips


def _load_previous(path: Path | None) -> dict[tuple[str, str], Verdict]:
    if path is None or not path.exists():
        return {}
    out: dict[tuple[str, str], Verdict] = {}
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise SystemExit(f"{path} is not a results file of this runner (a JSON list of verdicts); "
                         "pass another --results file, or run without --reuse-ray")
    for item in items:
        v = Verdict(library=item["library"], name=item["name"], sha=item.get("sha", ""),
                    skipped=item.get("skipped", ""))
        if item.get("ray"):
            v.ray = Run(**item["ray"])
        if item.get("raylite"):
            v.raylite = Run(**item["raylite"])
        out[(v.library, v.name)] = v
    return out


def summarize(verdicts: list[Verdict]) -> str:
    lines = ["| library | examples | ran on Ray | pass on raylite |", "|---|---|---|---|"]
    libraries = sorted({v.library for v in verdicts})
    for lib in libraries:
        mine = [v for v in verdicts if v.library == lib]
        on_ray = [v for v in mine if v.ray and v.ray.ok]
        passed = [v for v in on_ray if v.raylite and v.raylite.ok]
        lines.append(f"| {lib} | {len(mine)} | {len(on_ray)} | {len(passed)} |")
    lines.append("")
    for v in verdicts:
        if v.skipped:
            lines.append(f"SKIPPED {v.library}/{v.name}: {v.skipped}")
        elif v.ray and not v.ray.ok:
            why = "timed out" if v.ray.timed_out else f"exit {v.ray.returncode}"
            last = v.ray.tail.strip().splitlines()[-1:] or [""]
            lines.append(f"not run on Ray here ({why}) {v.library}/{v.name}: {last[0][:160]}")
    lines.append("")
    for v in verdicts:
        if v.ray and v.ray.ok and not (v.raylite and v.raylite.ok):
            run = v.raylite
            why = "not run" if run is None else (
                "timed out" if run.timed_out else f"exit {run.returncode}")
            lines.append(f"=== FAIL on raylite: {v.library}/{v.name} ({why})")
            if run is not None:
                lines.extend("    " + line for line in run.tail.strip().splitlines()[-25:])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directories", nargs="+",
                        help="directories of examples, `DIR` (named by its last component) or `NAME=DIR`")
    parser.add_argument("--ray-python", default="/opt/rayvenv/bin/python")
    parser.add_argument("--raylite-python", default=sys.executable)
    parser.add_argument("--raylite-root", type=Path, default=REPO,
                        help="the raylite checkout to put on PYTHONPATH (default: this repo)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--results", type=Path, help="write every verdict here (JSON)")
    parser.add_argument("--reuse-ray", action="store_true",
                        help="take Ray's verdicts from --results instead of running Ray again")
    parser.add_argument("--only", nargs="*", default=None, help="run only these example names")
    parser.add_argument("--shim-dir", type=Path, help="where to write the `ray` alias (default: a temp dir)")
    parser.add_argument("--alias", choices=("compat", "shim"), default="compat",
                        help="what `import ray` is: compat = the compat/ray distribution users install "
                             "(default), shim = a package that makes sys.modules['ray'] raylite itself "
                             "(how the figures before compat/ray existed were measured)")
    parser.add_argument("--recursive", action="store_true",
                        help="take examples from subdirectories too (named by their relative path)")
    parser.add_argument("--siblings", action="store_true",
                        help="start each example's working directory as a copy of the example's own "
                             "directory (examples that import or read sibling files)")
    args = parser.parse_args(argv)

    shim = write_shim(args.shim_dir or Path(tempfile.mkdtemp(prefix="ray-shim-")),
                      args.raylite_python, args.alias)
    previous = _load_previous(args.results if args.reuse_ray else None)
    if args.results and args.results.exists():
        kept = _load_previous(args.results)
    else:
        kept = {}
    verdicts: list[Verdict] = []
    for arg in args.directories:
        library, directory = named_directory(arg)
        skips = read_skips(directory)
        for script in find_examples(directory, args.recursive):
            name = str(script.relative_to(directory))
            key = (library, name)
            if args.only is not None and not {name, script.name, script.stem} & set(args.only):
                if key in kept:
                    verdicts.append(kept[key])
                continue
            v = Verdict(library=library, name=name, sha=file_sha(script), skipped=skips.get(name, ""))
            verdicts.append(v)
            if v.skipped:
                continue
            before = previous.get(key)
            if before is not None and before.ray is not None and before.sha in ("", v.sha):
                v.ray = before.ray
            else:
                v.ray = run_one(args.ray_python, script, ray_env(args.ray_python), args.timeout, args.siblings)
            if not v.ray.ok:
                print(f"[ray fails ] {library}/{name}", flush=True)
                continue
            temp_dir = Path(tempfile.mkdtemp(prefix="raylite-conf-"))
            env = raylite_env(shim, args.raylite_root, temp_dir, args.alias)
            v.raylite = run_one(args.raylite_python, script, env, args.timeout, args.siblings)
            stop_raylite(args.raylite_python, env)
            if v.raylite.ok:
                shutil.rmtree(temp_dir, ignore_errors=True)
            state = "pass" if v.raylite.ok else "FAIL"
            print(f"[{state:10}] {library}/{name} (ray {v.ray.seconds}s, "
                  f"raylite {v.raylite.seconds}s)", flush=True)
    if args.results:
        args.results.write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    print(summarize(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
