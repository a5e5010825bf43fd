"""The API server's guard against web pages: cross-site requests and DNS rebinding.

Why: the dashboard's cookie (or, in no-auth mode, nothing at all) is the token, and a browser
sends it with requests that *another* page starts: a form on a page at another port of the
same host (`SameSite=Lax` ignores ports) can POST a `text/plain` job, and a page whose name was
rebound to 127.0.0.1 talks to the server as same-origin. So, before the token check:
- a request from a browser (it sends `Origin`, `Referer`, `Sec-Fetch-*`, CORS preflight headers
  or a `Mozilla` user agent, as Ray's browser-request middleware tells them) must name in `Host`
  an address this server serves: an IP literal, a loopback name, this machine's names, or one
  of `RAYLITE_DASHBOARD_ALLOWED_HOSTS`; a rebound name is refused;
- a state-changing request (any method but GET, HEAD, OPTIONS) and every WebSocket upgrade must
  come from the server's own origin: an `Origin` other than `http(s)://<Host>` (or "null") and a
  `Sec-Fetch-Site` other than `same-origin`/`none` are refused, so another page can neither
  submit a job nor read its logs;
- a POST with a body must say `Content-Type: application/json` (what Ray's SDK, CLI and
  KubeRay send): a form or `text/plain` body, which a page may send without a preflight, is 415.
Programs (Ray's `ray job`, KubeRay, curl) send none of the browser headers and are unaffected.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from typing import Any

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_BROWSER_HEADERS = frozenset({b"origin", b"referer", b"sec-fetch-mode", b"sec-fetch-dest",
                              b"sec-fetch-site", b"sec-fetch-user", b"access-control-request-method",
                              b"access-control-request-headers"})


def _headers(scope: dict) -> dict[bytes, str]:
    return {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def is_browser_request(headers: dict[bytes, str]) -> bool:
    return headers.get(b"user-agent", "").startswith("Mozilla") or any(h in headers for h in _BROWSER_HEADERS)


def _host_name(host: str) -> str:
    """`Host` without its port, lower case; IPv6 literals without brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class BrowserGuard:
    """ASGI middleware in front of TokenAuth (so no-auth mode is guarded too)."""

    def __init__(self, app: Any, allowed_hosts: str = "") -> None:
        self.app = app
        extra = {h.strip().lower() for h in allowed_hosts.split(",") if h.strip()}
        self.any_host = "*" in extra
        self.hosts = {"localhost", socket.gethostname().lower(), *extra}
        self._fqdn_added = False

    def host_allowed(self, host: str) -> bool:
        name = _host_name(host)
        if self.any_host or name in self.hosts or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)  # a page cannot rebind an address literal
            return True
        except ValueError:
            pass
        if not self._fqdn_added:  # a DNS lookup: only for a name that is not already known
            self._fqdn_added = True
            self.hosts.add(socket.getfqdn().lower())
            return name in self.hosts
        return False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why = self.refusal(scope)
        if why is None:
            await self.app(scope, receive, send)
            return
        status, message = why
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        body = json.dumps({"result": False, "msg": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: dict) -> tuple[int, str] | None:
        """(status, why) when the request must not reach the app, else None."""
        headers = _headers(scope)
        host = headers.get(b"host", "")
        browser = is_browser_request(headers)
        if browser and not self.host_allowed(host):
            return 403, (f"Host {host!r} is not an address of this API server (a DNS rebinding page?). "
                         "Open it by IP address, localhost or this machine's name, or add the name to "
                         "RAYLITE_DASHBOARD_ALLOWED_HOSTS on the head.")
        method = scope.get("method", "GET")
        writes = scope["type"] == "websocket" or method not in SAFE_METHODS
        if writes and browser:
            origin = headers.get(b"origin")
            scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
            if origin is not None and origin.rstrip("/").lower() != f"{scheme}://{host}".lower():
                return 403, (f"cross-origin request refused: a page at {origin!r} may not "
                             f"{'open a WebSocket' if scope['type'] == 'websocket' else method} here. "
                             "Use the dashboard itself, or a program (the CLI, the SDK, curl).")
            site = headers.get(b"sec-fetch-site")
            if origin is None and site is not None and site not in ("same-origin", "none"):
                return 403, f"cross-site request refused (Sec-Fetch-Site: {site})"
        if method == "POST" and scope["type"] == "http" and _has_body(headers):
            ctype = headers.get(b"content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return 415, (f"a POST body must be JSON (Content-Type: application/json), not "
                             f"{ctype or 'undeclared'!r}")
        return None


def _has_body(headers: dict[bytes, str]) -> bool:
    if "chunked" in headers.get(b"transfer-encoding", "").lower():
        return True
    try:
        return int(headers.get(b"content-length", "0") or 0) > 0
    except ValueError:
        return True
