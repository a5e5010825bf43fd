"""The limits of Serve's HTTP proxy and the normalisation of request paths: pure, no I/O.

The proxy is a public edge: each limit bounds what one client can make it hold or wait for
(see `proxy_http.py` for where each is enforced). The fields are `http_options` of the same
names; `max_request_body_size_bytes` is also a deployment option, which wins for its routes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from urllib.parse import unquote_to_bytes

_MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What the proxy accepts from a client; the fields are `http_options` of the same names."""

    max_header_size_bytes: int = 16 * 1024      # request line + headers (h11's default in uvicorn)
    max_header_count: int = 100
    max_request_body_size_bytes: int = 100 * _MiB  # default for deployments that set none
    header_read_timeout_s: float = 30.0
    body_read_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0              # Ray's name and default
    max_connections: int = 10_000
    max_buffered_request_body_bytes: int = 256 * _MiB  # all connections' request bodies together

    @classmethod
    def from_options(cls, options: dict) -> Limits:
        return cls(**{f.name: options[f.name] for f in fields(cls) if options.get(f.name) is not None})


def normalize_path(raw: bytes) -> str | None:
    """The request target's path as routing and the app see it: percent-decoded (as ASGI's
    `path`), with `.` and `..` segments resolved (RFC 3986 5.2.4), so `/echo/../x` is `/x` and
    can never reach the app behind `/echo` carrying a `..`. None for a target that is not a path.

    >>> normalize_path(b"/echo/%2e%2e/x"), normalize_path(b"/a/./b/"), normalize_path(b"/../x")
    ('/x', '/a/b/', '/x')
    """
    if raw[:1] != b"/":
        if raw[:7].lower() == b"http://" or raw[:8].lower() == b"https://":  # absolute-form target
            start = raw.find(b"/", raw.find(b"//") + 2)
            raw = raw[start:] if start >= 0 else b"/"
        else:
            return "*" if raw == b"*" else None
    if b"%" in raw:
        raw = unquote_to_bytes(raw)
    path = raw.decode("utf-8", "surrogateescape")
    if "/." in path:
        path = _remove_dot_segments(path)
    return path


def _remove_dot_segments(path: str) -> str:
    segments = path.split("/")
    out: list[str] = []
    for seg in segments[1:]:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    result = "/" + "/".join(out)
    if segments[-1] in (".", "..") and not result.endswith("/"):
        result += "/"
    return result
