"""The API server's token check and route discovery (in-process, no cluster)."""

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from raylite.dashboard.auth import TokenAuth


def app(token="s3cret", allow_loopback=False):
    inner = Starlette(routes=[Route("/x", lambda r: PlainTextResponse("ok"))])
    return TestClient(TokenAuth(inner, token, allow_loopback))


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret"},
                                     {"Cookie": "raylite_token=nope"}])
def test_refused_without_the_right_token(headers):
    r = app().get("/x", headers=headers)
    assert r.status_code == 401 and "token" in r.json()["msg"]
    assert app().get("/missing", headers=headers).status_code == 401  # before routing: no 404 leaks


def test_header_cookie_and_query_token():
    c = app()
    assert c.get("/x", headers={"Authorization": "Bearer s3cret"}).text == "ok"
    r = c.get("/x", params={"token": "s3cret"})
    assert r.status_code == 200 and "raylite_token=s3cret" in r.headers["set-cookie"]
    assert c.get("/x").status_code == 200  # the cookie carries it now


def test_an_empty_cluster_token_accepts_nothing():
    assert app(token="").get("/x", headers={"Authorization": "Bearer "}).status_code == 401


def test_loopback_exemption_only_from_loopback():
    # TestClient's peer is "testclient", not loopback: still refused
    assert app(allow_loopback=True).get("/x").status_code == 401


def test_route_modules_are_discovered():
    from raylite.dashboard.app import route_modules

    names = {m.__name__.rsplit(".", 1)[-1] for m in route_modules()}
    assert {"jobs", "logs", "state", "version"} <= names
