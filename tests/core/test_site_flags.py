"""A driver started with `python -s` (no user site-packages) gets workers started the same way,
as Ray's do (Ray's test_site_flag_inherited), so tasks import what the driver imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """
import json, sys
import raylite
raylite.init(num_cpus=1)

@raylite.remote
def flags():
    return [sys.flags.no_site, sys.flags.no_user_site]

print("RESULT " + json.dumps({"driver": [sys.flags.no_site, sys.flags.no_user_site],
                              "task": raylite.get(flags.remote(), timeout=120)}))
raylite.shutdown()
"""


@pytest.mark.parametrize("flags", [[], ["-s"]])
def test_workers_inherit_the_drivers_site_flags(flags):
    temp = tempfile.mkdtemp(prefix="rl-site-", dir="/tmp")
    try:
        env = {**os.environ, "RAYLITE_TEMP_DIR": os.path.join(temp, "s"), "PYTHONPATH": ROOT}
        for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN"):
            env.pop(var, None)
        done = subprocess.run([sys.executable, *flags, "-c", PROGRAM], cwd=temp, env=env, capture_output=True,
                              text=True, timeout=240)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, (done.stdout[-2000:], done.stderr[-4000:])
        result = json.loads(lines[-1][len("RESULT "):])
        assert result["driver"] == [0, 1 if flags else 0]
        assert result["task"] == result["driver"]
    finally:
        shutil.rmtree(temp, ignore_errors=True)
