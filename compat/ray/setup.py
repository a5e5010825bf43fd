"""Build script of raylite's `ray` alias: pyproject.toml holds the metadata; this file only adds
the install-time guard.

The guard: pip installing this distribution into an environment that holds a real Ray would
uninstall Ray to make room (both are named `ray`), or, with `--target`/other tools, leave two
`ray` packages side by side. Either silently changes what `import ray` means, so the build stops
with a message that names both and the fix. It asks the target interpreter itself, in isolated
mode (`-I`, so pip's build environment does not hide its site-packages). Installs it cannot see
(another `--target` directory) are caught at import time by `ray/__init__.py`.
"""

from __future__ import annotations

import subprocess
import sys

from setuptools import setup

_PROBE = """
import importlib.metadata as m
try:
    d = m.distribution("ray")
except m.PackageNotFoundError:
    pass
else:
    print(d.version)
    print(d.locate_file(""))
"""


def _refuse_to_replace_a_real_ray() -> None:
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", _PROBE], capture_output=True,
                               text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return  # cannot ask: the import-time check still guards
    lines = probe.stdout.splitlines()
    if probe.returncode != 0 or not lines or "+raylite" in lines[0]:
        return  # no `ray` installed, or it is this alias (a reinstall or an upgrade)
    where = lines[1] if len(lines) > 1 else "this environment"
    sys.exit(
        f"error: Ray {lines[0]} is installed in {where} (interpreter {sys.executable}).\n"
        "raylite's `ray` alias would replace it: both provide the top-level `ray` module and the "
        "`ray` command, so one would silently take the other's place.\n"
        "Fix: keep Ray and use raylite as `import raylite as ray`, or uninstall Ray first "
        "(`python -m pip uninstall ray`), or install the alias into a separate virtualenv."
    )


_refuse_to_replace_a_real_ray()
setup()
