"""Choosing a replica and carrying a request to it over the direct channel.

One `Router` per deployment per process (proxy, driver, or a replica holding handles). It keeps
the replica set the controller publishes, a connection per replica, and for each replica the
queue length that replica reported on its last reply plus the requests this router has in
flight to it. A request goes to the less loaded of two randomly sampled replicas (power of two
choices) -- no probe round trip -- unless both are at `max_ongoing_requests`, in which case it
waits in the router's queue (bounded by `max_queued_requests`, then BackPressureError).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import deque
from typing import Any

import cloudpickle

from raylite.serve._internal import wire
from raylite.serve._internal.wire import (
    ACK_FIRST,
    CANCEL,
    KIND_CALL,
    R_CHUNK,
    R_CREDIT,
    R_END,
    R_ERR,
    R_LOST,
    R_OK,
    R_REJECT,
    R_START,
    R_STARTED,
    REQ,
)
from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

_NOT_LAST = frozenset((R_CHUNK, R_START, R_CREDIT))  # reply codes after which more frames of the request follow


class ReplicaDiedError(DeploymentUnavailableError):
    """The replica handling a request went away before answering."""


class Connection(wire.ClientProtocol):
    """A client connection to one replica; replies are matched to callbacks by request id.

    When the connection breaks (the replica died), a request the replica had acknowledged
    (R_STARTED: it entered user code) fails with code -1; any other gets R_LOST, which callers
    answer by sending it to another replica with ACK_FIRST (replicas acknowledge requests only
    while their handlers are slow: see ReplicaImpl._start; an unacknowledged request may have
    been running, so it gets one more run that is acknowledged, not an unbounded number).
    """

    def __init__(self, replica_id: str, router_set: ConnectionPool) -> None:
        sec = router_set.security
        super().__init__(sec.token, self._frame, self._lost, max_frame_bytes=sec.max_frame_bytes)
        self.replica_id = replica_id
        self.pool = router_set
        self.pending: dict[int, Any] = {}
        self.started: set[int] = set()

    def _frame(self, _proto: wire.FrameProtocol, msg: tuple) -> None:
        rid, code, payload, qlen = msg
        if code == R_STARTED:
            if rid in self.pending:
                self.started.add(rid)
            return
        cb = self.pending.get(rid)
        if cb is None:
            return
        if code in _NOT_LAST:
            self.started.add(rid)  # it answers: it certainly started
            cb(code, payload, qlen, False)
        else:
            del self.pending[rid]
            self.started.discard(rid)
            cb(code, payload, qlen, True)

    def _lost(self, _proto: wire.FrameProtocol, exc: BaseException | None) -> None:
        self.pool.forget(self.replica_id, self)
        pending, self.pending = self.pending, {}
        started, self.started = self.started, set()
        for rid, cb in pending.items():
            cb(-1 if rid in started else R_LOST, None, 0, True)


class ConnectionPool:
    """One persistent connection per replica, shared by all routers of the process."""

    def __init__(self, node_id: str, security: Any) -> None:
        self.node_id = node_id
        self.security = security  # raylite.experimental.ChannelSecurity
        self.conns: dict[str, Connection] = {}
        self.connecting: dict[str, asyncio.Future] = {}

    def forget(self, replica_id: str, conn: Connection) -> None:
        if self.conns.get(replica_id) is conn:
            del self.conns[replica_id]

    async def get(self, info: dict) -> Connection:
        rid = info["replica_id"]
        conn = self.conns.get(rid)
        if conn is not None and not conn.closed:
            return conn
        fut = self.connecting.get(rid)
        if fut is None:
            fut = asyncio.ensure_future(self._connect(info))
            self.connecting[rid] = fut
            fut.add_done_callback(lambda _f: self.connecting.pop(rid, None))
        return await asyncio.shield(fut)

    async def _connect(self, info: dict) -> Connection:
        """Same node: the replica's Unix socket; else its TCP port (TLS where the cluster uses it).
        Returns once both ends proved they know the cluster token (wire.py)."""
        loop = asyncio.get_running_loop()
        rid = info["replica_id"]
        sec = self.security
        factory = lambda: Connection(rid, self)  # noqa: E731
        last: Exception | None = None
        if info.get("unix_path") and info.get("node_id") == self.node_id:
            try:
                conn = await self._handshake(loop.create_unix_connection(factory, info["unix_path"]))
                self.conns[rid] = conn
                return conn
            except (OSError, asyncio.TimeoutError) as e:
                last = e
        if info.get("tcp_addr"):
            tls: dict[str, Any] = {}
            if sec.client_ssl is not None:
                tls = {"ssl": sec.client_ssl, "server_hostname": "",
                       "ssl_handshake_timeout": sec.handshake_timeout_s}
            try:
                host, port = info["tcp_addr"]
                conn = await self._handshake(loop.create_connection(factory, host, port, **tls))
                self.conns[rid] = conn
                return conn
            except (OSError, asyncio.TimeoutError) as e:
                last = e
        if isinstance(last, wire.HandshakeRefused):
            raise ReplicaDiedError(f"cannot use replica {rid}: {last}")
        raise ReplicaDiedError(f"cannot reach replica {rid} ({last}); it probably stopped")

    async def _handshake(self, connecting: Any) -> Connection:
        timeout_s = self.security.handshake_timeout_s
        _, conn = await asyncio.wait_for(connecting, timeout_s)
        try:
            await asyncio.wait_for(asyncio.shield(conn.ready), timeout_s)
        except BaseException:
            conn.abort()
            raise
        return conn


_rids = itertools.count(1)
_random = random.random


# how long a request waits for a deployment whose replica set is not published yet (starting)
STARTING_WAIT_S = 30.0
# how long a replica we could not connect to is left out of the published set
UNREACHABLE_S = 10.0


class Router:
    """Replica choice and queueing for one deployment."""

    def __init__(self, app_name: str, deployment_name: str, pool: ConnectionPool) -> None:
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.pool = pool
        self.replicas: list[dict] = []
        self.by_id: dict[str, dict] = {}
        self.inflight: dict[str, int] = {}
        self.qlen: dict[str, int] = {}
        self.max_ongoing = 5
        self.max_queued = -1
        self.backpressure: dict | None = None  # BackpressureConfig: how HTTP answers a shed request
        self.waiters: deque[asyncio.Future] = deque()
        # requests queued by callback (the proxy's path): [kind, meta, payload, on_reply, model_id, on_sent, dead]
        self.queued_sends: deque[list] = deque()
        self.deleted = False
        self._published = False  # a replica set was seen: None from then on means deleted
        self.have_set = asyncio.Event()
        self.failed_message = ""
        # replicas we could not connect to, and when: the controller may list a dead replica for a
        # while after we found it gone, and re-adding it would spend a request's retries on it
        self.unreachable: dict[str, float] = {}

    # ------------------------------------------------------------ replica set
    def update(self, value: dict | None) -> None:
        """Apply the controller's published view: {"replicas": [...], "max_ongoing_requests", ...}."""
        if value is None:
            if not self._published:
                return  # not published yet: the deployment is still starting (not deleted)
            self.deleted = True
            self.replicas = []
            self.by_id = {}
            self._wake_all()
            self.have_set.set()
            return
        self.deleted = False
        self._published = True
        self.max_ongoing = value.get("max_ongoing_requests", 5)
        self.max_queued = value.get("max_queued_requests", -1)
        self.backpressure = value.get("backpressure") or None
        self.failed_message = value.get("message", "") if value.get("failed") else ""
        self.replicas = self._reachable(value["replicas"])
        self.by_id = {r["replica_id"]: r for r in self.replicas}
        for rid in list(self.inflight):
            if rid not in self.by_id:
                del self.inflight[rid]
                self.qlen.pop(rid, None)
        self.have_set.set()
        self._wake_all()
        self._drain()

    def _reachable(self, replicas: list) -> list:
        """The published replicas minus those we failed to reach in the last UNREACHABLE_S (a
        live replica that refused one connect, e.g. under a flood, is tried again after that)."""
        if not self.unreachable:
            return list(replicas)
        now = time.monotonic()
        listed = {r["replica_id"] for r in replicas}
        self.unreachable = {rid: t for rid, t in self.unreachable.items()
                            if rid in listed and now - t < UNREACHABLE_S}
        return [r for r in replicas if r["replica_id"] not in self.unreachable]

    def _wake_all(self) -> None:
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_result(None)

    def _wake_one(self) -> None:
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def queued(self) -> int:
        return len(self.waiters) + len(self.queued_sends)

    def _backpressure_error(self, deployment: str) -> BackPressureError:
        cfg = self.backpressure or {}
        return BackPressureError(num_queued_requests=self.queued(), max_queued_requests=self.max_queued,
                                 deployment=deployment, status_code=int(cfg.get("status_code") or 503),
                                 retry_after_s=cfg.get("retry_after_s"))

    # ------------------------------------------------------------ choice
    def _load(self, rid: str) -> int:
        local = self.inflight.get(rid, 0)
        reported = self.qlen.get(rid, 0)
        if local == 0:
            # the reported length may be stale and no reply of ours will refresh it: rank by it,
            # but never let it block (the replica holds what exceeds max_ongoing_requests)
            return min(reported, self.max_ongoing - 1)
        return local if local > reported else reported

    def _pick(self, model_id: str = "") -> dict | None:
        reps = self.replicas
        if model_id:
            having = [r for r in reps if model_id in r.get("model_ids", ())]
            if having:
                best = min(having, key=lambda r: self._load(r["replica_id"]))
                if self._load(best["replica_id"]) < self.max_ongoing:
                    return best
        n = len(reps)
        if n == 0:
            return None
        if n == 1:
            r = reps[0]
            return r if self._load(r["replica_id"]) < self.max_ongoing else None
        i = int(_random() * n)
        j = int(_random() * (n - 1))
        if j >= i:
            j += 1
        a, b = reps[i], reps[j]
        la, lb = self._load(a["replica_id"]), self._load(b["replica_id"])
        if lb < la:
            a, la = b, lb
        if la < self.max_ongoing:
            return a
        best = min(reps, key=lambda r: self._load(r["replica_id"]))
        return best if self._load(best["replica_id"]) < self.max_ongoing else None

    async def _assign(self, model_id: str) -> dict:
        if not self.have_set.is_set():
            try:
                await asyncio.wait_for(self.have_set.wait(), STARTING_WAIT_S)
            except asyncio.TimeoutError:
                raise DeploymentUnavailableError(
                    f"deployment {self.deployment_name!r} of app {self.app_name!r} has no replicas yet "
                    f"after {STARTING_WAIT_S:g} s: it is still starting (its replicas are being created), "
                    "or no such deployment exists; serve.status() shows which. Retry shortly.") from None
        while True:
            if self.deleted:
                raise DeploymentUnavailableError(
                    f"deployment {self.deployment_name!r} of app {self.app_name!r} does not exist (deleted?)")
            rep = self._pick(model_id)
            if rep is not None:
                return rep
            if not self.replicas and self.failed_message:
                raise DeploymentUnavailableError(self.failed_message)
            if 0 <= self.max_queued <= self.queued():
                raise self._backpressure_error(self.deployment_name)
            fut = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self.waiters:
                    self.waiters.remove(fut)
                raise

    # ------------------------------------------------------------ sending
    async def send(self, kind: int, meta: tuple, payload: Any, on_reply: Any, model_id: str = "",
                   retries: int = 3) -> tuple[Connection, int]:
        """Send one request; `on_reply(code, payload, last)` gets every reply frame."""
        while True:
            rep = await self._assign(model_id)
            rid_ = rep["replica_id"]
            self.inflight[rid_] = self.inflight.get(rid_, 0) + 1
            try:
                conn = await self.pool.get(rep)
            except ReplicaDiedError:
                self._done(rid_, None)
                self._drop(rid_)
                if retries <= 0 and not self.replicas:  # past the retries, go on only while untried
                    raise                               # replicas remain (each failure drops one)
                retries -= 1
                continue
            self.inflight[rid_] -= 1
            return self._send_on(conn, rid_, kind, meta, payload, on_reply)

    def send_nowait(self, kind: int, meta: tuple, payload: Any, on_reply: Any,
                    model_id: str = "") -> tuple[Connection, int] | None:
        """The fast path: send at once if a replica has room and is connected, else None."""
        if self.waiters or self.queued_sends or not self.replicas:
            return None
        return self._try_send(kind, meta, payload, on_reply, model_id)

    def _try_send(self, kind: int, meta: tuple, payload: Any, on_reply: Any,
                  model_id: str) -> tuple[Connection, int] | None:
        rep = self._pick(model_id)
        if rep is None:
            return None
        rid_ = rep["replica_id"]
        conn = self.pool.conns.get(rid_)
        if conn is None or conn.closed:
            return None
        return self._send_on(conn, rid_, kind, meta, payload, on_reply)

    def queue_send(self, kind: int, meta: tuple, payload: Any, on_reply: Any, model_id: str,
                   on_sent: Any) -> list | None:
        """Queue a request that found every replica busy, without a task: `on_sent((conn, rid))`
        runs when a reply frees a slot. Returns the queue entry (set entry[6] = True to drop it),
        or None when the caller must take the async path (no replica set or connection yet).
        Raises BackPressureError when `max_queued_requests` are already waiting."""
        if not self.replicas or self.deleted:
            return None
        if self._pick(model_id) is not None:
            return None  # a replica has room but no connection yet: connect on the async path
        if 0 <= self.max_queued <= self.queued():
            raise self._backpressure_error(self.deployment_name)
        entry = [kind, meta, payload, on_reply, model_id, on_sent, False]
        self.queued_sends.append(entry)
        return entry

    def _drain(self) -> None:
        q = self.queued_sends
        while q:
            entry = q[0]
            if entry[6]:
                q.popleft()
                continue
            sent = self._try_send(entry[0], entry[1], entry[2], entry[3], entry[4])
            if sent is None:
                return
            q.popleft()
            entry[5](sent)

    def _send_on(self, conn: Connection, replica_id: str, kind: int, meta: tuple, payload: Any,
                 on_reply: Any) -> tuple[Connection, int]:
        self.inflight[replica_id] = self.inflight.get(replica_id, 0) + 1
        rid = next(_rids)
        qlen_map = self.qlen

        def cb(code: int, data: Any, qlen: int | None, last: bool) -> None:
            if last:
                self._done(replica_id, qlen)
            elif qlen is not None:
                qlen_map[replica_id] = qlen
            on_reply(code, data, last)

        conn.pending[rid] = cb
        try:
            conn.send((REQ, rid, kind, meta, payload))
        except BaseException:  # wire.FrameTooLarge, or a payload msgpack cannot carry
            del conn.pending[rid]
            self._done(replica_id, None)
            raise
        return conn, rid

    def _done(self, replica_id: str, qlen: int | None) -> None:
        n = self.inflight.get(replica_id, 0) - 1
        if n > 0:
            self.inflight[replica_id] = n
        else:
            self.inflight.pop(replica_id, None)
        if qlen is not None:
            self.qlen[replica_id] = qlen
        if self.queued_sends:
            self._drain()
        if self.waiters:
            self._wake_one()

    def _drop(self, replica_id: str) -> None:
        """Stop using a replica we could not reach, for UNREACHABLE_S or until the controller
        no longer lists it."""
        self.unreachable[replica_id] = time.monotonic()
        self.replicas = [r for r in self.replicas if r["replica_id"] != replica_id]
        self.by_id.pop(replica_id, None)


def cancel(conn: Connection, rid: int) -> None:
    if rid in conn.pending and not conn.closed:
        conn.send((CANCEL, rid))


async def call(router: Router, meta: tuple, method_args: tuple, model_id: str) -> Any:
    """One handle call: returns the result or raises the replica's error."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def on_reply(code: int, data: Any, last: bool) -> None:
        if fut.done():
            return
        if code == R_OK:
            fut.set_result(data)
        elif code == R_REJECT:
            fut.set_result(_RETRY)
        elif code == R_LOST:
            fut.set_result(_RESEND)
        elif code == R_ERR:
            fut.set_exception(cloudpickle.loads(data) if data else ReplicaDiedError("replica failed"))
        else:
            fut.set_exception(ReplicaDiedError(
                f"the replica of deployment {router.deployment_name!r} died while running this request (it had "
                "reached the deployment's code, so it was not sent to another replica)"))

    payload = cloudpickle.dumps(method_args)
    kind = KIND_CALL
    for _ in range(5):
        conn, rid = await router.send(kind, meta, payload, on_reply, model_id)
        try:
            data = await fut
        except asyncio.CancelledError:
            cancel(conn, rid)
            raise
        if data is _RETRY or data is _RESEND:
            if data is _RESEND:
                kind = KIND_CALL | ACK_FIRST  # it may have run: the next run is acknowledged
            fut = loop.create_future()
            continue
        return cloudpickle.loads(data)
    raise DeploymentUnavailableError(f"deployment {router.deployment_name!r}: every replica refused the request "
                                     "(shutting down)")


_RETRY = object()   # the replica refused it (shutting down): send it elsewhere
_RESEND = object()  # the replica died without acknowledging it (R_LOST)
_STREAM_END = object()


async def stream(router: Router, meta: tuple, method_args: tuple, model_id: str, queue: asyncio.Queue,
                 holder: list) -> None:
    """A streaming handle call: items go into `queue`, then _STREAM_END or an exception."""
    def on_reply(code: int, data: Any, last: bool) -> None:
        if code == R_CHUNK:
            queue.put_nowait(cloudpickle.loads(data))
        elif code == R_END:
            queue.put_nowait(_STREAM_END)
        elif code == R_ERR:
            queue.put_nowait(cloudpickle.loads(data) if data else ReplicaDiedError("replica failed"))
        elif code == R_REJECT:
            queue.put_nowait(DeploymentUnavailableError("replica is shutting down; retry"))
        elif code == R_LOST:
            queue.put_nowait(ReplicaDiedError(
                f"the replica of deployment {router.deployment_name!r} died before streaming this response; retry"))
        else:
            queue.put_nowait(ReplicaDiedError(
                f"the replica of deployment {router.deployment_name!r} streaming this response died"))

    conn, rid = await router.send(KIND_CALL, meta, cloudpickle.dumps(method_args), on_reply, model_id)
    holder.append((conn, rid))
