"""A ray:// address that cannot work fails at init() with a message naming the cause."""

from __future__ import annotations

import pytest

from raylite._core import config as config_mod
from raylite._core import protocol as P

from .conftest import free_port


def test_no_server_there(client_head):
    import raylite as ray

    port = free_port()  # nothing listens there
    with pytest.raises(ConnectionError, match=f"cannot reach a Ray Client server at ray://127.0.0.1:{port}"):
        ray.init(f"ray://127.0.0.1:{port}")
    assert not ray.is_initialized()


def test_wrong_token(client_head, monkeypatch):
    import raylite as ray

    monkeypatch.setattr(config_mod, "_CONFIG", config_mod.get_config().replace(token="not-the-token"))
    with pytest.raises(ConnectionError, match="refused this program.*wrong or missing cluster token.*RAYLITE_TOKEN"):
        ray.init(client_head["url"])
    assert not ray.is_initialized()


def test_head_rpc_port_is_not_the_client_port(client_head):
    import raylite as ray

    with pytest.raises(ConnectionError, match="not a Ray Client server.*--ray-client-server-port"):
        ray.init(f"ray://{client_head['address']}")
    assert not ray.is_initialized()


def test_protocol_version_differs(client_head, monkeypatch):
    import raylite as ray

    monkeypatch.setattr(P, "PROTOCOL_VERSION", P.PROTOCOL_VERSION + 100)
    with pytest.raises(ConnectionError, match="protocol version mismatch"):
        ray.init(client_head["url"])
    assert not ray.is_initialized()


def test_raylite_version_differs(client_head, monkeypatch):
    import raylite as ray

    monkeypatch.setattr(ray, "__version__", "0.0.1-other")
    with pytest.raises(RuntimeError, match="the cluster runs raylite .* and this program raylite 0.0.1-other"):
        ray.init(client_head["url"])
    assert not ray.is_initialized()
