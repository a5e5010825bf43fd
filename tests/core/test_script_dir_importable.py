"""As in Ray, a local cluster's workers can import the modules that sit next to the driver script,
whatever the current folder (Hamilton's Ray adapter ships dataflow functions by module name)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_module_beside_the_script_imports_in_workers(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper_beside_script.py").write_text("def triple(x):\n    return 3 * x\n")
    (app / "main.py").write_text(
        "import raylite\n"
        "import helper_beside_script\n"
        "raylite.init(num_cpus=1)\n"
        "print(raylite.get(raylite.remote(helper_beside_script.triple).remote(7)))\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sessions = tempfile.mkdtemp(prefix="rl-sd-", dir="/tmp")  # short: unix socket paths
    env = dict(os.environ, PYTHONPATH=str(REPO), RAYLITE_TEMP_DIR=sessions, RAYLITE_DASHBOARD_PORT="0")
    try:
        proc = subprocess.run([sys.executable, str(app / "main.py")], capture_output=True, text=True,
                              cwd=elsewhere, env=env, timeout=120)
    finally:
        shutil.rmtree(sessions, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "21"
