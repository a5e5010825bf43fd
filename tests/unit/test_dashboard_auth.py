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
                                     {"Cookie": "raylite_token_80=nope"}])
def test_refused_without_the_right_token(headers):
    r = app().get("/x", headers=headers)
    assert r.status_code == 401 and "token" in r.json()["msg"]
    assert app().get("/missing", headers=headers).status_code == 401  # before routing: no 404 leaks


def test_header_cookie_and_query_token():
    c = app()
    assert c.get("/x", headers={"Authorization": "Bearer s3cret"}).text == "ok"
    r = c.get("/x", params={"token": "s3cret"})
    assert r.status_code == 200 and "raylite_token_80=s3cret" in r.headers["set-cookie"]
    assert "SameSite=Lax" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
    assert c.get("/x").status_code == 200  # the cookie carries it now


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_a_browser_link_with_the_token_sets_the_cookie_and_redirects_to_a_clean_url():
    c = app()
    r = c.get("/x?tab=2&token=s3cret", headers=BROWSER, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/x?tab=2"  # the token leaves the address bar and history
    assert r.headers["set-cookie"].startswith("raylite_token_80=s3cret;")
    assert r.headers["cache-control"] == "no-store"
    assert c.get(r.headers["location"], headers=BROWSER).text == "ok"  # the cookie opens it


def test_the_redirect_never_leaves_the_server():
    from raylite.dashboard.auth import _clean_location

    scope = {"path": "//evil.example/x", "query_string": b"token=s3cret&a=1"}
    assert _clean_location(scope) == "/evil.example/x?a=1"


def test_a_browser_without_the_token_gets_a_page_saying_where_to_find_it():
    r = app().get("/", headers=BROWSER)
    assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
    assert "?token=" in r.text and "raylite start --head" in r.text and "session_latest/token" in r.text
    assert "s3cret" not in r.text
    wrong = app().get("/", headers={**BROWSER, "Cookie": "raylite_token_80=old"})
    assert wrong.status_code == 401 and "not this cluster" in wrong.text


def test_api_clients_keep_the_json_401():
    r = app().get("/x", headers={"Accept": "application/json"})
    assert r.status_code == 401 and r.headers["content-type"] == "application/json"
    assert "token" in r.json()["msg"]


def test_the_token_in_the_url_wins_over_a_stale_cookie():
    c = app()
    r = c.get("/x?token=s3cret", headers={**BROWSER, "Cookie": "raylite_token_80=old"},
              follow_redirects=False)
    assert r.status_code == 303 and "raylite_token_80=s3cret" in r.headers["set-cookie"]


def test_cookies_of_two_clusters_on_one_host_do_not_collide():
    other_port = TestClient(TokenAuth(Starlette(routes=[Route("/x", lambda r: PlainTextResponse("ok"))]),
                                      "s3cret"), base_url="http://testserver:8266")
    assert other_port.get("/x", headers={"Cookie": "raylite_token_80=s3cret"}).status_code == 401
    assert other_port.get("/x", headers={"Cookie": "raylite_token_8266=s3cret"}).text == "ok"


def test_an_empty_cluster_token_accepts_nothing():
    assert app(token="").get("/x", headers={"Authorization": "Bearer "}).status_code == 401


def test_loopback_exemption_only_from_loopback():
    # TestClient's peer is "testclient", not loopback: still refused
    assert app(allow_loopback=True).get("/x").status_code == 401


def test_route_modules_are_discovered():
    from raylite.dashboard.app import route_modules

    names = {m.__name__.rsplit(".", 1)[-1] for m in route_modules()}
    assert {"jobs", "logs", "state", "version"} <= names
