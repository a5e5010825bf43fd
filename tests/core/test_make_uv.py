"""`make run` in a `uv venv` environment, which has no pip: the Makefile finds uv's pip instead
(`No module named pip` once stopped it at its first line). A plain venv and conda have pip and
take the Makefile's first branch, which the rest of the suite (CI's `make test`) exercises."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _uv() -> str | None:
    return shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))


@pytest.mark.skipif(shutil.which("make") is None or _uv() is None, reason="needs make and uv")
def test_make_run_in_a_uv_venv(tmp_path):
    uv = _uv()
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP", "PYTHON", "CONDA_PREFIX")}
    env["PATH"] = os.path.dirname(uv) + os.pathsep + env.get("PATH", "")
    # a cache kept across runs, so only the first run downloads the core's wheels (~30 MB)
    env.setdefault("UV_CACHE_DIR", os.path.join("/tmp", "raylite-test-uv-cache"))
    venv = tmp_path / "uvenv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env,
                   timeout=120)
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0, \
        "uv venv made an environment with pip: this test would not test the uv path"
    env["RAYLITE_TEMP_DIR"] = temp = tempfile.mkdtemp(prefix="rl-uv-", dir="/tmp")  # short: sockets
    try:
        proc = subprocess.run(["make", "-C", str(REPO), "run", f"PYTHON={python}"], capture_output=True,
                              text=True, timeout=400, env=env)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "uv pip install -e ." in out, out[-4000:]  # the installer the Makefile chose
    assert "No module named pip" not in out
    assert out.rstrip().endswith("demo finished: all checks passed") or \
        "demo finished: all checks passed" in proc.stdout, out[-4000:]
    # the demo ran on the uv environment's raylite (the editable install of this checkout)
    where = subprocess.run([python, "-c", "import raylite; print(raylite.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout
    assert where.strip().startswith(str(REPO)), where
