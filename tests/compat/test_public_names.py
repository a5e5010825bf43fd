"""Ray 2.60's public names that raylite has keep existing.

tests/compat/ray_public_names.json is written by bench/public_names.py (dir() of Ray 2.60's
public modules and classes, from /opt/rayvenv, against raylite's): `present` lists, per module,
the names raylite provides, and this test fails if one of them disappears. `missing` is the
record of gaps left (not tested; rerun the script after closing some, and commit the file).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

TABLE = json.loads((Path(__file__).with_name("ray_public_names.json")).read_text())["modules"]


def _raylite_module(ray_name: str):
    return importlib.import_module("raylite" + ray_name[len("ray"):])


@pytest.mark.parametrize("module", sorted(m for m, row in TABLE.items() if row["present"]))
def test_every_recorded_ray_name_still_exists(module):
    mod = _raylite_module(module)
    gone = []
    for name in TABLE[module]["present"]:
        owner = mod
        for part in name.split("."):
            if not hasattr(owner, part):
                gone.append(name)
                break
            owner = getattr(owner, part)
    assert not gone, (f"{module} lost Ray names {gone}: user code that uses them breaks. Restore them, or "
                      "rerun bench/public_names.py --write if the removal is deliberate.")


def test_the_names_closed_by_the_conformance_work_are_recorded():
    assert "ActorClassInheritanceException" in TABLE["ray.actor"]["present"]
    assert "cluster_not_supported" in TABLE["ray.cluster_utils"]["present"]
    assert {"as_completed", "map_unordered"} <= set(TABLE["ray.util"]["present"])
    assert {"In", "NotIn", "Exists", "DoesNotExist"} <= set(TABLE["ray.util.scheduling_strategies"]["present"])
