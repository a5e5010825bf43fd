"""A local cluster (init() with no address) serves Ray Client only when asked
(RAYLITE_RAY_CLIENT_SERVER_PORT), and then on 127.0.0.1 alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from raylite._core import config as config_mod

from .conftest import free_port


def _other_ip() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    with contextlib.suppress(OSError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            ip = s.getsockname()[0]
            return None if ip.startswith("127.") else ip
    return None


def test_local_cluster_serves_ray_client_on_loopback(monkeypatch):
    import raylite as ray
    from raylite._core import runtime

    if ray.is_initialized():
        ray.shutdown()
    tmp_path = tempfile.mkdtemp(prefix="rlcc", dir="/tmp")  # short: Unix socket paths live there
    port = free_port()
    monkeypatch.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
    monkeypatch.setattr(config_mod, "_CONFIG", config_mod.get_config().replace(temp_dir=str(tmp_path)))
    ray.init(num_cpus=1)
    try:
        program = (f"import raylite as ray; ray.init('ray://127.0.0.1:{port}'); "
                   "print(ray.get(ray.remote(lambda: 6 * 7).remote()))")
        env = dict(os.environ, RAYLITE_TOKEN=runtime.driver().token, RAYLITE_TEMP_DIR=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.stdout.strip() == "42", out.stderr[-3000:]
        ip = _other_ip()
        if ip is None:
            pytest.skip("this machine has no address besides loopback")
        with pytest.raises(OSError):
            socket.create_connection((ip, port), timeout=3).close()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp_path, ignore_errors=True)
