"""Diff the public names of Ray 2.60's modules and classes against raylite's.

    python bench/public_names.py                      # print the gaps, most-used modules first
    python bench/public_names.py --write tests/compat/ray_public_names.json

A public name is one without a leading underscore: `dir()` of each module below and of each
public class it defines. Ray's side is read by Ray's own interpreter (`--ray-python`, run as a
subprocess, so the two never meet in one process); raylite's through the `ray` alias (compat/ray,
so `ray.util.X` is `raylite.util.X`). `--write` records, per module, the names raylite has
(`present`, which tests/compat/test_public_names.py then keeps from disappearing) and those it
lacks (`missing`, the gaps left, for the record).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# most-used first: what user programs import
MODULES = [
    "ray", "ray.exceptions", "ray.actor", "ray.remote_function", "ray.runtime_context", "ray.util",
    "ray.util.scheduling_strategies", "ray.util.placement_group", "ray.util.queue", "ray.util.actor_pool",
    "ray.util.state", "ray.util.metrics", "ray.util.multiprocessing", "ray.cluster_utils", "ray.runtime_env",
    "ray.job_submission", "ray.types", "ray.dag", "ray.serve", "ray.serve.handle", "ray.serve.config",
    "ray.serve.schema", "ray.serve.exceptions", "ray.serve.batching", "ray.serve.context", "ray.train",
    "ray.tune", "ray.data", "ray.autoscaler", "ray.experimental",
]

_COLLECT = r'''
import importlib, inspect, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        module = importlib.import_module(name)
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
        continue
    names, classes = [], {}
    for n in sorted(dir(module)):
        if n.startswith("_") or n in ("PublicAPI", "DeveloperAPI", "Deprecated", "annotations"):
            continue
        try:
            obj = getattr(module, n)
        except Exception:
            continue
        if inspect.ismodule(obj):
            continue  # a submodule or an import (json, os): reached by its own path
        home = getattr(obj, "__module__", None) or ""
        if (inspect.isclass(obj) or callable(obj)) and not home.startswith("ray"):
            continue  # imported helpers (typing, dataclasses, pydantic) are not Ray's names
        if type(obj).__module__ == "typing":
            continue
        names.append(n)
        if inspect.isclass(obj):
            classes[n] = sorted(a for a in dir(obj) if not a.startswith("_"))
    out[name] = {"names": names, "classes": classes}
print(json.dumps(out))
'''


def collect(python: str, env: dict | None, modules: list[str]) -> dict:
    proc = subprocess.run([python, "-c", _COLLECT, json.dumps(modules)], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode:
        raise SystemExit(f"collecting names with {python} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def raylite_env() -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}
    env["PYTHONPATH"] = f"{REPO / 'compat' / 'ray' / 'src'}:{REPO}"
    return env


def ray_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "RAYLITE_"))}


def diff(ray_names: dict, lite_names: dict) -> dict:
    """module -> {"present": [...], "missing": [...]}; a class's attribute is "Class.attr"."""
    table = {}
    for module, ray_side in ray_names.items():
        if "error" in ray_side:
            continue
        lite_side = lite_names.get(module, {})
        have = set(lite_side.get("names", []))
        for cls, attrs in lite_side.get("classes", {}).items():
            have.update(f"{cls}.{a}" for a in attrs)
        wanted = list(ray_side["names"])
        for cls, attrs in ray_side["classes"].items():
            if cls in have:  # a class raylite lacks counts once, not once per attribute
                wanted += [f"{cls}.{a}" for a in attrs]
        table[module] = {"present": sorted(n for n in wanted if n in have),
                         "missing": sorted(n for n in wanted if n not in have),
                         **({"error": lite_side["error"]} if "error" in lite_side else {})}
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray-python", default="/opt/rayvenv/bin/python")
    parser.add_argument("--write", default=None, help="JSON file to record present/missing names in")
    parser.add_argument("--modules", nargs="*", default=MODULES)
    args = parser.parse_args(argv)
    ray_names = collect(args.ray_python, ray_env(), args.modules)
    lite_names = collect(sys.executable, raylite_env(), args.modules)
    table = diff(ray_names, lite_names)
    total_present = sum(len(v["present"]) for v in table.values())
    total_missing = sum(len(v["missing"]) for v in table.values())
    print(f"{'module':<34} {'present':>8} {'missing':>8}")
    for module, row in table.items():
        print(f"{module:<34} {len(row['present']):>8} {len(row['missing']):>8}  "
              f"{', '.join(row['missing'][:8])}{' ...' if len(row['missing']) > 8 else ''}"
              f"{'  [' + row['error'] + ']' if 'error' in row else ''}")
    print(f"{'total':<34} {total_present:>8} {total_missing:>8}")
    if args.write:
        Path(args.write).write_text(json.dumps({"ray_version": "2.60.0", "modules": table}, indent=1,
                                               sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
