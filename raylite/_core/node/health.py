"""The node's health server (the agent port, 52365) and its metrics port, for KubeRay's probes.

KubeRay decides a pod is ready, and alive, by probing it with no credentials
(ray-operator/controllers/ray/common/pod.go, initLivenessAndReadinessProbe):
`wget -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success` on every pod,
`.../api/gcs_healthz` on the head, or (Ray >= 2.53) an HTTP GET of `/api/healthz` on the same
port. These three paths are the only unauthenticated endpoints of a raylite cluster, so this
server is small and strict:
- it answers GET (and HEAD) of exactly those paths, with `success` or a 503 naming which
  check failed (nothing about the cluster beyond that); every other request is a bare 404;
- a request head over REQUEST_MAX_BYTES, or one not complete within the handshake timeout
  (slowloris), is dropped; a body is never read; each connection serves one request;
- at most MAX_CONNECTIONS connections wait for their request at once; past that the oldest
  waiting one is closed, so idle connections cannot lock a real probe out.

The metrics port serves `GET /metrics` (Prometheus text) of this node, and only to a caller
that presents the cluster token (`Authorization: Bearer <token>` or `x-ray-authorization`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core.config import get_config
from raylite._core.transport.gate import HandshakeGate
from raylite._core.transport.handshake import token_matches

log = logging.getLogger("raylite.node_health")

REQUEST_MAX_BYTES = 8 * 1024
MAX_CONNECTIONS = 64
HEALTH_PATHS = ("/api/healthz", "/api/local_raylet_healthz", "/api/gcs_healthz")
_CHECK_TIMEOUT_S = 1.5  # KubeRay's probe gives up after 2 s


class NodeChecks:
    """What the probes ask, answered from the live node (and head) of this process."""

    def __init__(self, node: Any, head: Any = None) -> None:
        self.node = node
        self.head = head  # the Head when this process runs the head, else None

    def node_ok(self) -> str:
        """"" when the node daemon serves and is connected to the head, else why not."""
        node = self.node
        if node.stopped is None or node.stopped.is_set():
            return "node is not running"
        if node.head is None or node.head.is_closed():
            return "node is not connected to the head"
        if getattr(node, "_fenced", False):
            return "node was declared dead and is rejoining"
        return ""

    async def head_ok(self) -> str:
        """"" when the head's control store answers a request, else why not."""
        if self.head is None:
            return "not the head node"
        conn = self.node.head
        if conn is None or conn.is_closed():
            return "head is not reachable"
        try:
            await conn.request(P.KvGet("raylite_health", b""), _CHECK_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - any failure is "not healthy", detail stays here
            return "head did not answer"
        return ""

    async def check(self, path: str) -> str:
        if path == "/api/local_raylet_healthz":
            return self.node_ok()
        if path == "/api/gcs_healthz":
            return await self.head_ok()
        why = self.node_ok()  # /api/healthz: the node, and the head where it runs here
        if not why and self.head is not None:
            why = await self.head_ok()
        return why

    def metrics(self) -> str:
        return render_metrics(self.node, connected=not self.node_ok())


def render_metrics(node: Any, *, connected: bool) -> str:
    """This node's Prometheus metrics (resources, object store, workers, link to the head)."""
    labels = f'node_id="{node.node_id.hex()}",node_ip="{node.ip}"'
    lines = ["# TYPE raylite_node_up gauge", f"raylite_node_up{{{labels}}} {1 if connected else 0}"]
    total = R.from_fixed(node.total)
    avail = R.from_fixed(node.available)
    lines.append("# TYPE raylite_node_resource_total gauge")
    lines += [f'raylite_node_resource_total{{{labels},resource="{_esc(k)}"}} {v:g}'
              for k, v in sorted(total.items()) if not k.startswith("node:") and "_group_" not in k]
    lines.append("# TYPE raylite_node_resource_available gauge")
    lines += [f'raylite_node_resource_available{{{labels},resource="{_esc(k)}"}} {avail.get(k, 0):g}'
              for k in sorted(total) if not k.startswith("node:") and "_group_" not in k]
    store = node.store
    lines += ["# TYPE raylite_object_store_used_bytes gauge",
              f"raylite_object_store_used_bytes{{{labels}}} {store.used_bytes}",
              "# TYPE raylite_object_store_capacity_bytes gauge",
              f"raylite_object_store_capacity_bytes{{{labels}}} {store.capacity_bytes}",
              "# TYPE raylite_object_store_objects gauge",
              f"raylite_object_store_objects{{{labels}}} {len(store.objects)}"]
    states: dict[str, int] = {}
    for w in node.pool.workers.values():
        states[w.state] = states.get(w.state, 0) + 1
    lines.append("# TYPE raylite_node_workers gauge")
    lines += [f'raylite_node_workers{{{labels},state="{_esc(s)}"}} {n}' for s, n in sorted(states.items())]
    lines.append("# TYPE raylite_node_pending_leases gauge")
    lines.append(f"raylite_node_pending_leases{{{labels}}} {len(node.pending)}")
    return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Server:
    def __init__(self, checks: NodeChecks, kind: str, token: str) -> None:
        self.checks = checks
        self.kind = kind
        self.token = token
        # connected, request head not read yet: this port's and the process's strangers
        self.waiting = HandshakeGate(f"the node's {kind} server", MAX_CONNECTIONS)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        oldest = self.waiting.admit(writer, lambda: loop.call_soon_threadsafe(writer.transport.abort))
        if oldest is not None:
            oldest.transport.abort()  # type: ignore[attr-defined]
        try:
            head = await asyncio.wait_for(_read_head(reader), get_config().handshake_timeout_s)
            self.waiting.release(writer)
            if head is not None:
                status, body, ctype = await self._answer(head)
                _respond(writer, status, body, ctype, head_only=head[0] == "HEAD")
                await asyncio.wait_for(writer.drain(), 5.0)
        except (asyncio.TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.waiting.release(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, head: tuple[str, str, dict[str, str]]) -> tuple[int, bytes, str]:
        method, path, headers = head
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 404, b"", "text/plain"
        if self.kind == "health" and path in HEALTH_PATHS:
            why = await self.checks.check(path)
            return (200, b"success", "text/plain") if not why else (503, why.encode(), "text/plain")
        if self.kind == "metrics" and path == "/metrics":
            if not self._authorized(headers):
                return 401, b"the cluster token is required (Authorization: Bearer <token>)", "text/plain"
            return 200, self.checks.metrics().encode(), "text/plain; version=0.0.4"
        return 404, b"", "text/plain"

    def _authorized(self, headers: dict[str, str]) -> bool:
        if get_config().auth_disabled:  # RAY_AUTH_MODE=disabled, accepted with RAYLITE_ALLOW_NO_AUTH=1
            return True
        for name in ("authorization", "x-ray-authorization"):
            value = headers.get(name, "")
            if value.lower().startswith("bearer ") and token_matches(value[7:].strip(), self.token):
                return True
        return False


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    """The request line and headers, or None for a malformed or oversized request."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = await reader.read(REQUEST_MAX_BYTES + 1 - len(buf))
        if not chunk:
            return None
        buf += chunk
        if len(buf) > REQUEST_MAX_BYTES:
            return None
    lines = buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], headers


_REASONS = {200: "OK", 401: "Unauthorized", 404: "Not Found", 503: "Service Unavailable"}


def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *, head_only: bool) -> None:
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                 f"Content-Length: {len(body)}\r\nDate: {date}\r\nConnection: close\r\n\r\n".encode())
    if not head_only:
        writer.write(body)


async def serve(checks: NodeChecks, host: str | list[str], port: int, *, kind: str,
                token: str) -> asyncio.AbstractServer:
    """Listen on host:port (host: one address or several): kind "health" (the probes' paths)
    or "metrics" (/metrics, token)."""
    server = _Server(checks, kind, token)
    return await asyncio.start_server(server.handle, host, port, reuse_address=True, limit=REQUEST_MAX_BYTES)
