"""Shared by the ecosystem programs: run one mode, time it, print one JSON line.

Each program in this folder is a realistic use of a library built on Ray, through that library's
documented Ray integration and `import ray` (with compat/ray installed that is raylite; in a Ray
virtualenv it is Ray). Each also has the library's own non-Ray mode, so a test can compare the two
results and a benchmark can time the Ray mode on raylite and on Ray.

    python <program>.py ray|native [--cpus N]
prints, as its last line, {"mode", "result", "init_s", "work_s", "ray_backend", "ray_version"}:
ray_backend is "raylite" when `import ray` resolved to raylite, else "ray".
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from typing import Any


def canonical(value: Any) -> Any:
    """Floats rounded to 9 significant digits, tuples as lists: equal results compare equal as JSON."""
    if isinstance(value, float):
        return float(f"{value:.9g}") if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return canonical(value.item())
    return value


def main(on_ray: Callable[[int], Any], native: Callable[[int], Any], start_ray: Callable[[int], None]) -> None:
    """Parse the mode, run it, print the JSON line. `start_ray(cpus)` is timed as init_s."""
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ray", "native"])
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    init_s, backend, version = 0.0, "", ""
    if args.mode == "ray":
        t0 = time.perf_counter()
        start_ray(args.cpus)
        init_s = time.perf_counter() - t0
        import ray

        backend = "raylite" if ray.get.__module__.startswith("raylite") else "ray"
        version = ray.__version__
    t0 = time.perf_counter()
    result = (on_ray if args.mode == "ray" else native)(args.cpus)
    work_s = time.perf_counter() - t0
    print(json.dumps({"mode": args.mode, "result": canonical(result), "init_s": init_s,
                      "work_s": work_s, "ray_backend": backend, "ray_version": version}))


def start_ray(cpus: int) -> None:
    """The usual start of a Ray program: a local cluster of `cpus` CPUs."""
    import ray

    ray.init(num_cpus=cpus)
