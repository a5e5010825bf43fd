"""Token check for every request, before any route runs (plain ASGI middleware).

Accepted: `Authorization: Bearer <token>`, the `raylite_token` cookie, or `?token=<token>` in
the URL (which also sets the cookie, so a browser needs it once). Anything else is a 401
(HTTP) or a close with code 4401 before accept (websocket).
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

COOKIE = "raylite_token"


class TokenAuth:
    def __init__(self, app: Any, token: str, allow_loopback: bool = False) -> None:
        self.app = app
        self.token = token
        self.allow_loopback = allow_loopback

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        presented, from_query = _presented(scope)
        ok = bool(self.token) and presented is not None and hmac.compare_digest(
            presented.encode(), self.token.encode())
        if not ok and self.allow_loopback and _from_loopback(scope):
            ok = True
        if not ok:
            await _refuse(scope, receive, send, presented is not None)
            return
        if from_query and scope["type"] == "http":
            send = _with_cookie(send, self.token)
        await self.app(scope, receive, send)


def _presented(scope: dict) -> tuple[str | None, bool]:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip(), False
    cookie = headers.get("cookie")
    if cookie:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie)
        except Exception:  # noqa: BLE001  a malformed cookie header is no token
            jar = SimpleCookie()
        if COOKIE in jar:
            return jar[COOKIE].value, False
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0], True
    return None, False


def _from_loopback(scope: dict) -> bool:
    client = scope.get("client") or ("", 0)
    server = scope.get("server") or ("", 0)
    return client[0] in ("127.0.0.1", "::1") and server[0] in ("127.0.0.1", "::1")


async def _refuse(scope: dict, receive: Any, send: Any, presented: bool) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4401, "reason": "missing or wrong cluster token"})
        return
    why = "wrong cluster token" if presented else "missing cluster token"
    body = (f'{{"result": false, "msg": "401 Unauthorized: {why}. Send the header '
            '\\"Authorization: Bearer <token>\\"; the token is in the head\'s session directory '
            '(<temp dir>/session_*/token) or RAYLITE_TOKEN."}').encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="raylite"'),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _with_cookie(send: Any, token: str) -> Any:
    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            headers.append((b"set-cookie", f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/".encode()))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped
