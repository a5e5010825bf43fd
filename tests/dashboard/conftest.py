"""A live local cluster with its HTTP server, shared by a test module."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

import raylite


@dataclass
class Dashboard:
    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **kw):
        import httpx

        return httpx.get(self.url + path, headers=self.headers, timeout=30, **kw)


@pytest.fixture(scope="module")
def dashboard():
    if raylite.is_initialized():
        raylite.shutdown()
    ctx = raylite.init(num_cpus=2, dashboard_port=0)  # a free port: 8265 may be taken on a shared box
    if not ctx.dashboard_url:
        raylite.shutdown()
        pytest.skip("this cluster runs without its HTTP server (include_dashboard is off)")
    from raylite import api

    yield Dashboard("http://" + ctx.dashboard_url.split("/?")[0], api.ensure_initialized().token)
    raylite.shutdown()


@pytest.fixture
def artifacts(tmp_path):
    """Where screenshots go: $RAYLITE_TEST_ARTIFACTS if set (kept), else the test's tmp_path."""
    base = os.environ.get("RAYLITE_TEST_ARTIFACTS")
    if base:
        os.makedirs(os.path.join(base, "dashboard"), exist_ok=True)
        return os.path.join(base, "dashboard")
    return str(tmp_path)
