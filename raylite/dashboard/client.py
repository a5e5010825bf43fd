"""Finding and calling the head's HTTP API from a client (CLI, JobSubmissionClient, util.state).

`resolve(address)` turns what the user gave into (base URL, token):
- "http(s)://HOST:PORT": used as it is;
- None / "auto" / "": RAY_API_SERVER_ADDRESS or an http RAY_ADDRESS / RAYLITE_ADDRESS, else
  the cluster this process is connected to, else the cluster `raylite start` left running
  here, else the newest live local cluster, else http://127.0.0.1:8265;
- "HOST:PORT" of a head (`raylite start`'s address): its API's URL from the address file;
  any other "HOST:PORT" is taken as the API's own address (as Ray does);
- any of these followed by "/?token=TOKEN" (the dashboard link `init()` prints, which is
  `"http://" + ctx.dashboard_url`): that token, over every other source.
The token is RAYLITE_TOKEN if set, else read from the head's token file on this machine
(only its user can read it). Headers passed explicitly win over both.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8265"


def resolve(address: str | None = None) -> tuple[str, str]:
    from raylite._core.cluster import files as CF
    from raylite._core.cluster import sessions
    from raylite._core.config import env_api_server_address, get_config
    from raylite._core.config import env_token as config_env_token

    config = get_config()
    # config.token also holds RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH under RAY_AUTH_MODE=token
    env_token = config_env_token() or config.token
    if address and "?token=" in address:  # the dashboard link init() prints (ctx.dashboard_url)
        address, _, link_token = address.partition("?token=")
        url, token = resolve(address.rstrip("/"))
        return url, link_token.split("&", 1)[0] or token
    if not address or address == "auto":
        value = env_api_server_address()
        if value:
            return value.rstrip("/"), env_token or _token_for_url(value, config.temp_dir)
        url, token = _connected_cluster()
        if url:
            return url, env_token or token
    if address and address.startswith(("http://", "https://")):
        url = address.rstrip("/")
        return url, env_token or _token_for_url(url, config.temp_dir)
    info = CF.read_address_file(config.temp_dir)
    if info and info.get("dashboard_url") and sessions.is_live(info.get("session_dir", "")) and (
            not address or address == "auto" or CF.normalize_address(address) == info.get("address")):
        return info["dashboard_url"], env_token or _read(info.get("token_file", ""))
    if address and address != "auto":
        url = "http://" + address.split("://", 1)[-1].rstrip("/")
        return url, env_token or _token_for_url(url, config.temp_dir)
    newest = _live_local_urls(config.temp_dir)
    if newest:
        return newest[-1]
    return DEFAULT_URL, env_token or _token_for_url(DEFAULT_URL, config.temp_dir)


def _connected_cluster() -> tuple[str, str]:
    import sys

    rt = sys.modules.get("raylite._core.runtime")
    info = rt.driver() if rt is not None else None
    if info is None or not getattr(info, "dashboard_url", ""):
        return "", ""
    return info.dashboard_url, info.token


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _live_local_urls(temp_dir: str) -> list[tuple[str, str]]:
    """(url, token) of every live cluster session on this machine with an API, oldest first."""
    from raylite._core.cluster import sessions

    out = []
    for session in sessions.sessions(temp_dir):
        url = _read(os.path.join(session, "dashboard_url"))
        if url and sessions.is_live(session):
            out.append((url, _read(os.path.join(session, "token"))))
    return out


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _same_url(found: str, url: str) -> bool:
    """The same API server: equal URLs, or loopback names for one another with the same scheme
    and port (`http://localhost:8265` is the `http://127.0.0.1:8265` a head wrote down)."""
    if found.rstrip("/") == url:
        return True
    from urllib.parse import urlsplit

    a, b = urlsplit(found), urlsplit(url)
    try:
        same_port = a.port == b.port and a.port is not None
    except ValueError:
        return False
    return a.scheme == b.scheme and same_port and a.hostname in _LOOPBACK and b.hostname in _LOOPBACK


def _token_for_url(url: str, temp_dir: str) -> str:
    url = url.rstrip("/")
    for found, token in _live_local_urls(temp_dir):
        if _same_url(found, url):
            return token
    return ""


class ApiClient:
    """A small synchronous client of the API: base URL, token header, Ray-style errors."""

    def __init__(self, address: str | None = None, headers: dict[str, Any] | None = None,
                 timeout_s: float = 60.0, verify: Any = True, cookies: dict[str, Any] | None = None) -> None:
        import httpx

        self.url, token = resolve(address)
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        if token and not any(k.lower() == "authorization" for k in self.headers):
            self.headers["Authorization"] = f"Bearer {token}"
        if verify is True and not self.url.startswith("https:"):
            verify = False  # plain HTTP: loading the CA bundle (~50 ms a CLI call) would check nothing
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout_s, verify=verify,
                                  cookies=cookies)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as e:
            raise ConnectionError(
                f"could not reach the raylite API server at {self.url} ({e}). Start a cluster with "
                "`raylite start --head` (or raylite.init()), or pass --address / address= with the "
                "dashboard's URL, e.g. http://127.0.0.1:8265.") from None
        if r.status_code == 401:
            raise PermissionError(
                f"the raylite API server at {self.url} refused the request (401): pass the cluster token "
                "with RAYLITE_TOKEN=<token> or RAY_AUTH_TOKEN=<token> with RAY_AUTH_MODE=token (the token "
                "is in the head's session directory, "
                "<temp dir>/session_*/token), or headers={'Authorization': 'Bearer <token>'}.")
        return r

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self.request(method, path, **kwargs)
        if r.status_code >= 400:
            raise RuntimeError(f"Request failed with status code {r.status_code}: {r.text.rstrip('.')}.")
        return r.json()

    def ws_url(self, path: str) -> str:
        return ("wss://" if self.url.startswith("https://") else "ws://") + self.url.split("://", 1)[1] + path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._http.close()
