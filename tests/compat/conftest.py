"""The `ray` name (compat/ray) as a user gets it: these tests import the installed alias, never a
test-only shim, and skip (saying how to install it) where it is not installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def alias_installed() -> bool:
    """`import ray` finds raylite's alias (not a real Ray, not nothing)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        return False
    with open(spec.origin, encoding="utf-8") as f:
        return "raylite under Ray's name" in f.read(2000)


requires_alias = pytest.mark.skipif(
    not alias_installed(), reason="compat/ray is not installed here: pip install -e ./compat/ray "
    "(make install-test does it)")


@pytest.fixture(scope="module")
def ray_alias():
    if not alias_installed():
        pytest.skip("compat/ray is not installed here: pip install -e ./compat/ray")
    import ray

    return ray


def run_python(code: str, *, env: dict | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter that imports this checkout's raylite (as a user's would)."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, full_env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout_s)
