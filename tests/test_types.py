"""mypy, strict, on the core's pure modules (the list is pyproject.toml's [tool.mypy] files)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_pure_core_modules_are_strictly_typed():
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"mypy (strict) found errors; fix them, don't ignore them:\n{done.stdout}{done.stderr}"
