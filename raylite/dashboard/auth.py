"""Token check for every request, before any route runs (plain ASGI middleware).

Accepted, in this order: `Authorization: Bearer <token>`, `X-Ray-Authorization: Bearer <token>`
(what KubeRay sends, and what proxies that keep `Authorization` for themselves leave alone),
`?token=<token>` in the URL, or the `raylite_token_<port>` cookie (HttpOnly, SameSite=Lax), or
Ray's `ray-authentication-token` cookie. Anything else is a 401 (HTTP) or a close with code 4401
before accept (websocket). Ray 2.60's own clients (`ray job`, `serve`, `ray list`) send
`Authorization: Bearer <RAY_AUTH_TOKEN>` when RAY_AUTH_MODE=token is set.

Browsers get in the way Jupyter's users do: `init()` and `raylite start --head` print
`http://HOST:PORT/?token=<token>`. A browser that opens it (a GET asking for text/html) is
answered with a redirect to the same URL without the token, which sets the cookie; so the
token leaves the address bar and the history at once, and every later page and API call of
that browser carries the cookie. A browser that arrives without a token (or with a stale one)
gets a small HTML page saying where to find the link; API clients keep getting the JSON 401.
The cookie's name carries the server's port, so two clusters on one machine (one host name,
two ports) do not overwrite each other's cookie. The token in the URL wins over a cookie, so
a link to a restarted cluster replaces the old cluster's cookie instead of being refused.
"""

from __future__ import annotations

import html
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from raylite._core.transport.handshake import token_matches

COOKIE_PREFIX = "raylite_token"
# the only path served without the token: KubeRay's head probe (`wget -T 2 -q -O-
# http://localhost:8265/api/gcs_healthz | grep success`) sends none; it answers `success` or an error
UNAUTHENTICATED_PATHS = frozenset({"/api/gcs_healthz"})
RAY_COOKIE = "ray-authentication-token"


def cookie_name(scope: dict) -> str:
    """`raylite_token_<port>`: the port this server listens on (cookies ignore ports)."""
    port = (scope.get("server") or ("", None))[1]
    return f"{COOKIE_PREFIX}_{port}" if port else COOKIE_PREFIX


class TokenAuth:
    def __init__(self, app: Any, token: str, allow_loopback: bool = False, no_auth: bool = False) -> None:
        self.app = app
        self.token = token
        self.allow_loopback = allow_loopback
        self.no_auth = no_auth  # RAY_AUTH_MODE=disabled accepted with RAYLITE_ALLOW_NO_AUTH=1

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or (
                scope["type"] == "http" and scope.get("method") in ("GET", "HEAD")
                and scope.get("path") in UNAUTHENTICATED_PATHS):
            await self.app(scope, receive, send)
            return
        presented, from_query = _presented(scope)
        ok = token_matches(presented, self.token)
        if not ok and ((self.allow_loopback and _from_loopback(scope)) or self.no_auth):
            ok = True
        if not ok:
            await _refuse(scope, receive, send, presented is not None)
            return
        if from_query and scope["type"] == "http":
            if _is_browser_page_load(scope):
                await _redirect_without_token(scope, send, self.token)
                return
            send = _with_cookie(send, cookie_name(scope), self.token)
        await self.app(scope, receive, send)


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _presented(scope: dict) -> tuple[str | None, bool]:
    headers = _headers(scope)
    for name in ("authorization", "x-ray-authorization"):
        auth = headers.get(name, "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip(), False
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    if query.get("token"):
        return query["token"], True
    cookie = headers.get("cookie")
    if cookie:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie)
        except Exception:  # noqa: BLE001  a malformed cookie header is no token
            jar = SimpleCookie()
        for name in (cookie_name(scope), RAY_COOKIE):
            if name in jar:
                return jar[name].value, False
    return None, False


def _is_browser_page_load(scope: dict) -> bool:
    """A browser navigating to a page (not a script's fetch, not an API client)."""
    return (scope["type"] == "http" and scope.get("method") in ("GET", "HEAD")
            and "text/html" in _headers(scope).get("accept", ""))


def _from_loopback(scope: dict) -> bool:
    client = scope.get("client") or ("", 0)
    server = scope.get("server") or ("", 0)
    return client[0] in ("127.0.0.1", "::1") and server[0] in ("127.0.0.1", "::1")


def _clean_location(scope: dict) -> str:
    """The request's own path and query, minus `token`: always a path on this server."""
    path = "/" + scope.get("path", "/").lstrip("/")  # never "//host": no open redirect
    query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                                          keep_blank_values=True) if k != "token"]
    location = quote(path, safe="/:@!$&'()*+,;=-._~")
    return location + ("?" + urlencode(query) if query else "")


async def _redirect_without_token(scope: dict, send: Any, token: str) -> None:
    location = _clean_location(scope)
    body = f'<a href="{html.escape(location)}">Continue</a>'.encode()
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode("latin-1")),
                            (b"set-cookie", _cookie_header(cookie_name(scope), token)),
                            (b"cache-control", b"no-store"),
                            (b"referrer-policy", b"no-referrer"),
                            (b"content-type", b"text/html; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _cookie_header(name: str, token: str) -> bytes:
    # Lax, not Strict: a link opened from another site (a chat, a notebook on another host)
    # still gets in after the redirect; cross-site POSTs, fetches and websockets still do not
    # carry it.
    return f"{name}={token}; HttpOnly; SameSite=Lax; Path=/".encode()


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>raylite dashboard: token needed</title>
<style>body{{font-family:system-ui,sans-serif;max-width:42em;margin:3em auto;padding:0 1em;
line-height:1.5;color:#222}}code{{background:#f2f2f2;padding:0 .25em}}</style></head>
<body><h1>raylite dashboard</h1>
<p>{why} This dashboard opens with the cluster's token in the link, the way Jupyter does.</p>
<ul>
<li>Open the link printed when the cluster started: <code>raylite.init()</code> and
<code>raylite start --head</code> print <code>http://HOST:PORT/?token=...</code> (one line on
standard error / in the start message).</li>
<li>Or add <code>?token=&lt;token&gt;</code> to this address yourself. The token is in the file
<code>session_latest/token</code> under the head's temp dir (<code>RAYLITE_TEMP_DIR</code>,
by default <code>/tmp/raylite-sessions</code>) on the head's machine, readable only by the
user who started the cluster; a driver has it as <code>RAYLITE_TOKEN</code>.</li>
</ul>
<p>The browser keeps it in a cookie for this port, and the address bar is cleaned of it.</p>
</body></html>
"""


async def _refuse(scope: dict, receive: Any, send: Any, presented: bool) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4401, "reason": "missing or wrong cluster token"})
        return
    why = "wrong cluster token" if presented else "missing cluster token"
    if _is_browser_page_load(scope):
        text = ("The token this browser sent is not this cluster's (an older cluster's link or "
                "cookie?)." if presented else "This browser has not sent the cluster token yet.")
        body = _PAGE.format(why=text).encode()
        content_type = b"text/html; charset=utf-8"
    else:
        body = (f'{{"result": false, "msg": "401 Unauthorized: {why}. Send the header '
                '\\"Authorization: Bearer <token>\\"; the token is in the head\'s session directory '
                '(<temp dir>/session_*/token) or RAYLITE_TOKEN."}').encode()
        content_type = b"application/json"
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", content_type),
                            (b"www-authenticate", b'Bearer realm="raylite"'),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _with_cookie(send: Any, name: str, token: str) -> Any:
    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            headers.append((b"set-cookie", _cookie_header(name, token)))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped
