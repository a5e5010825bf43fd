"""Which addresses name the head `raylite start` registered on this machine (its token is then
read from the head's token file, as for the exact address): Ray's examples connect to a local
head as `localhost:6379` or `127.0.0.1:6379` whatever IP the head printed."""

from __future__ import annotations

from raylite._core.cluster import files as CF


def _register(tmp_path, address: str, bind: str = "0.0.0.0") -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret-token\n")
    CF.write_address_file(str(tmp_path), address, str(token_file), str(tmp_path), bind=bind)


def test_a_loopback_name_with_the_registered_port_gets_the_local_token(tmp_path):
    _register(tmp_path, "10.1.2.3:6379")
    for address in ("10.1.2.3:6379", "127.0.0.1:6379", "localhost:6379", "ray://localhost:6379"):
        assert CF.resolve(address, str(tmp_path)) == (CF.normalize_address(address), "secret-token")


def test_another_port_or_host_gets_no_token(tmp_path):
    _register(tmp_path, "10.1.2.3:6379")
    assert CF.resolve("127.0.0.1:6380", str(tmp_path)) == ("127.0.0.1:6380", "")
    assert CF.resolve("10.9.9.9:6379", str(tmp_path)) == ("10.9.9.9:6379", "")


def test_an_explicit_token_wins(tmp_path):
    _register(tmp_path, "10.1.2.3:6379")
    assert CF.resolve("localhost:6379", str(tmp_path), "mine") == ("localhost:6379", "mine")


def test_a_head_bound_to_one_ip_does_not_lend_its_token_to_loopback(tmp_path):
    """With --node-ip-address the head listens on that IP only: another process may hold the
    loopback port, and must not be sent the token."""
    _register(tmp_path, "10.1.2.3:6379", bind="10.1.2.3")
    assert CF.resolve("127.0.0.1:6379", str(tmp_path)) == ("127.0.0.1:6379", "")
    _register(tmp_path, "127.0.0.1:6379", bind="127.0.0.1")
    assert CF.resolve("localhost:6379", str(tmp_path)) == ("localhost:6379", "secret-token")


def test_an_api_url_is_refused_as_a_cluster_address_naming_the_right_one():
    """RAY_ADDRESS=http://127.0.0.1:8265 (set for `ray job submit`, as Ray's docs do) made
    init() fail with "Name or service not known" for a host called `http`."""
    import pytest

    for url in ("http://127.0.0.1:8265", "https://head:8265/"):
        with pytest.raises(ValueError, match="API server's URL.*HOST:PORT.*ray://HOST:10001"):
            CF.normalize_address(url)
