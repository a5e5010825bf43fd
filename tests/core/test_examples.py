"""examples/demo.py (what `make run` runs) completes on a fresh local cluster and says what it did."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_every_step_and_exits_zero(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "demo.py")], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    out = proc.stdout
    assert "1 node, 2 CPUs" in out, out
    match = re.search(r"pi ~= (\d\.\d+)", out)
    assert match and abs(float(match.group(1)) - 3.14159) < 0.01, out
    assert "the Tally actor agrees" in out, out
    assert "bundles [0, 1] placed on node" in out, out
    assert "the cluster's processes are gone" in out, out
    assert out.rstrip().endswith("demo finished: all checks passed"), out
    assert "Traceback" not in proc.stderr, proc.stderr
