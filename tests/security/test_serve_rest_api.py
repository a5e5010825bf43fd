"""The Serve REST API and /api/ray/version behind the cluster token: no token, a wrong one
(in either header), garbage and enormous bodies; the server stays up and nothing is deployed."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import httpx
import pytest

import raylite
from tests.api_fixtures import start_api_cluster

PATH = "/api/serve/applications/"
ROUTES = [("GET", PATH), ("PUT", PATH), ("DELETE", PATH), ("GET", "/api/ray/version")]
VALID = {"applications": [{"name": "x", "import_path": "os:getcwd"}]}


@pytest.fixture(scope="module")
def api():
    api = start_api_cluster(num_cpus=1)
    yield api
    raylite.shutdown()


def agent_log(api) -> str:
    return os.path.join(api.session_dir, "logs", "serve_rest_agent.log")


def test_missing_or_wrong_token_is_refused_before_anything_runs(api):
    wrong = [{}, {"Authorization": "Bearer nope"}, {"x-ray-authorization": "Bearer nope"},
             {"Authorization": f"Basic {api.token}"}, {"Cookie": "ray-authentication-token=nope"}]
    for method, path in ROUTES:
        for headers in wrong:
            r = httpx.request(method, api.url + path, headers=headers, json=VALID, timeout=30)
            assert r.status_code == 401, (method, path, headers, r.text)
    # refused requests never reached the Serve agent: it was not even started
    assert not os.path.exists(agent_log(api))


def test_x_ray_authorization_and_rays_cookie_are_accepted(api):
    for headers in ({"x-ray-authorization": f"Bearer {api.token}"},
                    {"Cookie": f"ray-authentication-token={api.token}"},
                    # KubeRay behind a proxy that uses Authorization for itself
                    {"Authorization": "Basic abc", "X-Ray-Authorization": f"Bearer {api.token}"}):
        r = httpx.get(api.url + "/api/ray/version", headers=headers, timeout=30)
        assert r.status_code == 200 and r.json()["ray_version"], (headers, r.text)
    r = httpx.get(api.url + PATH, headers={"x-ray-authorization": f"Bearer {api.token}"}, timeout=60)
    assert r.status_code == 200 and r.json()["applications"] == {}


def test_garbage_bodies_are_400_and_deploy_nothing(api):
    with api.client() as c:
        for body in (b"\x00\xff" * 1000, os.urandom(4096), b"[" * 200_000, b'"just a string"',
                     b'{"applications": "not a list"}', b'{"applications": [{"import_path": 7}]}',
                     b'{"applications": [{"import_path": "a:b", "deployments": [{"name": "d", '
                     b'"num_replicas": -3}]}]}'):
            r = c.put(PATH, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, (body[:40], r.status_code, r.text)
        assert c.get(PATH).json()["applications"] == {}
        assert c.get("/api/version").status_code == 200


def test_enormous_bodies_are_refused_unread(api):
    host, port = urlsplit(api.url).hostname, urlsplit(api.url).port
    with socket.create_connection((host, port), timeout=30) as s:  # claims 1 TiB, sends 10 bytes
        s.sendall((f"PUT {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {2**40}\r\n\r\n").encode() + b"{" * 10)
        assert s.recv(200).startswith(b"HTTP/1.1 413")

    def chunks():
        block = b" " * (1 << 20)
        for _ in range(64):  # 64 MiB of whitespace, streamed without a length
            yield block

    with api.client() as c:
        r = c.put(PATH, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "MiB" in r.text
        assert c.get("/api/version").status_code == 200
        assert c.get(PATH).json()["applications"] == {}
