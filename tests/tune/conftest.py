"""Tune's fixtures: one local 2-CPU cluster per module (from tests/conftest.py), and a fresh
storage directory per test."""

import pytest


@pytest.fixture
def storage(tmp_path):
    return str(tmp_path / "results")
