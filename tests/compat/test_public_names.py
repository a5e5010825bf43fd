"""Ray 2.60's public names that raylite has keep existing.

tests/compat/ray_public_names.json is written by bench/public_names.py (dir() of Ray 2.60's
public modules and classes, from /opt/rayvenv, against raylite's): `present` lists, per module,
the names raylite provides, and this test fails if one of them disappears. `missing` is the
record of gaps left (not tested; rerun the script after closing some, and commit the file).

The names are looked up in a child interpreter: importing every public module (torch, pandas,
transformers, ...) into the test process would make every later local cluster's zygote preload
all of them (launch.heavy_modules_in_use), seconds per cluster for the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NAMES_FILE = Path(__file__).with_name("ray_public_names.json")
TABLE = json.loads(NAMES_FILE.read_text())["modules"]
REPO = Path(__file__).resolve().parents[2]

_LOOKUP = """
import importlib, json, sys
table = json.loads(open(sys.argv[1]).read())["modules"]
gone = {}
for module, row in table.items():
    if not row["present"]:
        continue
    try:
        mod = importlib.import_module("raylite" + module[len("ray"):])
    except Exception as e:
        gone[module] = [f"(import failed: {type(e).__name__}: {e})"]
        continue
    lost = []
    for name in row["present"]:
        owner = mod
        for part in name.split("."):
            if not hasattr(owner, part):
                lost.append(name)
                break
            owner = getattr(owner, part)
    gone[module] = lost
print(json.dumps(gone))
"""


@pytest.fixture(scope="module")
def gone_names() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _LOOKUP, str(NAMES_FILE)], capture_output=True, text=True,
                          timeout=600, cwd=str(REPO), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", sorted(m for m, row in TABLE.items() if row["present"]))
def test_every_recorded_ray_name_still_exists(module, gone_names):
    gone = gone_names[module]
    assert not gone, (f"{module} lost Ray names {gone}: user code that uses them breaks. Restore them, or "
                      "rerun bench/public_names.py --write if the removal is deliberate.")


def test_the_names_closed_by_the_conformance_work_are_recorded():
    assert "ActorClassInheritanceException" in TABLE["ray.actor"]["present"]
    assert "cluster_not_supported" in TABLE["ray.cluster_utils"]["present"]
    assert {"as_completed", "map_unordered"} <= set(TABLE["ray.util"]["present"])
    assert {"In", "NotIn", "Exists", "DoesNotExist"} <= set(TABLE["ray.util.scheduling_strategies"]["present"])
