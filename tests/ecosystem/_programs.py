"""Run an examples/ecosystem program in a fresh interpreter, as its users would, and read its result.

The programs say `import ray`: with compat/ray installed that is raylite. A fresh process per
run, because each library fixes its engine for the life of the process (Modin's MODIN_ENGINE,
Daft's runner) and the program starts its own cluster like any Ray script.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "examples" / "ecosystem"


def _env(sessions: Path | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, RAYLITE_DASHBOARD_PORT="0")
    if sessions is not None:  # ray.init() starts this program's own cluster, never joins one left running
        env["RAYLITE_TEMP_DIR"] = str(sessions)
    return env


@functools.lru_cache(maxsize=1)
def _ray_resolution() -> str:
    """'' when `import ray` is raylite in a fresh interpreter, else why not."""
    probe = "import ray; print(ray.get.__module__)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=120)
    if proc.returncode != 0:
        return ("`import ray` fails here: install raylite's `ray` distribution "
                f"(pip install -e {REPO / 'compat' / 'ray'}): {proc.stderr.strip().splitlines()[-1:]}")
    if not proc.stdout.strip().startswith("raylite"):
        return f"`import ray` is not raylite here (ray.get comes from {proc.stdout.strip()}): a real Ray is installed"
    return ""


def require(module: str, pin: str) -> None:
    """Skip, saying what to install, when the library or raylite's `ray` name is missing."""
    pytest.importorskip(module, reason=f"{module} is not installed: pip install '{pin}'")
    reason = _ray_resolution()
    if reason:
        pytest.skip(reason)


def run(program: str, mode: str, cwd: Path, cpus: int = 2, timeout_s: float = 600) -> dict:
    """Run `program` in `mode` ('ray' or 'native'); its JSON line (mode, result, init_s, work_s, ray_backend)."""
    cmd = [sys.executable, str(PROGRAMS / f"{program}.py"), mode, "--cpus", str(cpus)]
    # short: the session's unix sockets live under it (pytest's tmp_path can be too long for them)
    sessions = Path(tempfile.mkdtemp(prefix="rl-eco-", dir="/tmp"))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(sessions), cwd=cwd, timeout=timeout_s)
    finally:
        shutil.rmtree(sessions, ignore_errors=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    # the library's own run (no raylite in it) is only the reference: a crash of the library in
    # the interpreter's teardown, after its result was printed, is not raylite's (daft's native
    # runner aborts there now and then: "PyGILState_Release ... finalizing")
    torn_down = mode == "native" and lines and "Python runtime state: finalizing" in proc.stderr
    assert proc.returncode == 0 or torn_down, (f"{program} {mode} exited {proc.returncode}\nstdout:\n"
                                               f"{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}")
    assert lines, f"{program} {mode} printed no result line:\n{proc.stdout[-3000:]}"
    return json.loads(lines[-1])


def ray_matches_native(program: str, cwd: Path) -> dict:
    """Run both modes; assert the Ray mode ran on raylite and agrees with the library's own mode."""
    on_ray = run(program, "ray", cwd)
    native = run(program, "native", cwd)
    assert on_ray["ray_backend"] == "raylite", on_ray["ray_backend"]
    assert on_ray["result"] == native["result"]
    return on_ray["result"]
