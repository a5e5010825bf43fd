"""The API client (jobs, state, Serve CLIs) finds the token of a head on this machine by its
dashboard URL: `http://localhost:PORT` must find the head that wrote `http://127.0.0.1:PORT`
(`ray job submit --address http://localhost:8265` was refused with a 401)."""

from __future__ import annotations

from raylite.dashboard import client


def test_loopback_names_with_the_same_port_are_the_same_server(monkeypatch):
    monkeypatch.setattr(client, "_live_local_urls", lambda temp_dir: [("http://127.0.0.1:8265", "tok")])
    for url in ("http://127.0.0.1:8265", "http://localhost:8265/", "http://[::1]:8265"):
        assert client._token_for_url(url, "/unused") == "tok", url


def test_another_port_scheme_or_host_gets_no_token(monkeypatch):
    monkeypatch.setattr(client, "_live_local_urls", lambda temp_dir: [("http://127.0.0.1:8265", "tok")])
    for url in ("http://localhost:8266", "https://localhost:8265", "http://10.0.0.5:8265",
                "http://localhost", "http://localhost:notaport"):
        assert client._token_for_url(url, "/unused") == "", url
