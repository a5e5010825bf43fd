"""The replica: an actor hosting one instance of the user's deployment.

Control calls (initialize, reconfigure, check_health, metrics, shutdown) arrive as Core actor
calls from the controller. Requests arrive on the direct channel (`wire.py`): the replica's own
event loop (uvloop when installed) listens on a Unix socket and a TCP port and runs every
request as a task on that loop, so user `async def` code, `@serve.batch` queues and handles to
other deployments all live on one loop. Sync user methods run inline on the loop, as in Ray.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import socket
import time
import traceback
from collections import deque
from typing import Any

import cloudpickle

from raylite.serve import context as serve_context
from raylite.serve._internal import client, http_util, logs, wire, ws_session
from raylite.serve._internal.event_loops import start_loop_thread
from raylite.serve._internal.wire import (
    ACK_FIRST,
    CANCEL,
    KIND_CALL,
    KIND_HTTP,
    KIND_WS,
    MSG,
    R_CHUNK,
    R_END,
    R_ERR,
    R_OK,
    R_REJECT,
    R_STARTED,
    REQ,
)

_ACK_AFTER_S = 0.0002  # requests taking longer than this on average are acknowledged (see _start)


class _Stats:
    """Request counters and recent latencies, drained by the controller's metrics poll."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.latencies_ms: deque[float] = deque(maxlen=5000)

    def record(self, latency_s: float, error: bool) -> None:
        self.requests += 1
        if error:
            self.errors += 1
        self.latencies_ms.append(latency_s * 1000.0)

    def drain(self) -> dict:
        out = {"requests": self.requests, "errors": self.errors, "latencies_ms": list(self.latencies_ms)}
        self.latencies_ms.clear()
        return out


class ReplicaImpl:
    """Everything the replica does; the actor class below only forwards control calls here."""

    def __init__(self, app_name: str, deployment_name: str, replica_id: str, definition: bytes,
                 init_args: bytes, config: dict, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.local = loop is not None  # serve.run(_local_testing_mode=True): in the driver, no cluster
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.replica_id = replica_id
        self.config = config
        self._definition = definition
        self._init_args = init_args
        self.loop = loop or start_loop_thread("serve-replica")
        self.ongoing = 0
        self.draining = False
        self.stats = _Stats()
        self.tasks: dict[tuple[int, int], asyncio.Task] = {}
        self.websockets: dict[tuple[int, int], ws_session.WebSocketSession] = {}
        # requests past max_ongoing_requests (several routers can together exceed it) wait here
        self.max_ongoing = int(config.get("max_ongoing_requests") or 5)
        self.backlog: deque[tuple] = deque()
        self.instance: Any = None
        self.callable: Any = None
        self.asgi_app: Any = None
        self.lifespan: Any = None  # ingress.Lifespan of the ASGI app
        self.is_function = False
        self.inline_http = False  # a sync __call__ / function: HTTP requests run without a task
        self.http_takes_request = True  # False for `def __call__(self)`: called with no arguments
        self.cost_s = 0.0  # moving average of a request's time here (see _start)
        self.unix_path = ""
        self.tcp_addr: tuple[str, int] | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._security: Any = None  # raylite.experimental.ChannelSecurity, set when the servers open
        self._gate: wire.HandshakeGate | None = None
        self.logger = logs.replica_logger(app_name, deployment_name, replica_id, config.get("logging_config"))
        if not self.local:
            client.set_process_loop(self.loop)

    # ------------------------------------------------------------ lifecycle (run on self.loop)
    async def initialize(self) -> dict:
        """Construct the user's object, apply user_config, open the request channel."""
        target = cloudpickle.loads(self._definition)
        args, kwargs = cloudpickle.loads(self._init_args)
        from raylite.serve._internal.common import ReplicaID

        me = self.config.get("_replica") or {}
        gang = me.get("gang")
        serve_context._set_internal_replica_context(serve_context.ReplicaContext(
            app_name=self.app_name, deployment=self.deployment_name, replica_tag=self.replica_id,
            replica_id=ReplicaID.from_replica_tag(self.replica_id), rank=_rank(me),
            world_size=int(me.get("world_size", 1)), _version=me.get("version", ""),
            gang_context=serve_context.GangContext(**gang) if gang else None))
        recipe = None
        if isinstance(target, tuple) and target and target[0] == "__serve_ingress__":
            _, target, recipe = target
        else:
            import starlette.requests  # noqa: F401 - warm it before the first request
        cls_or_fn = target
        if inspect.isclass(cls_or_fn):
            instance = cls_or_fn.__new__(cls_or_fn)
            init = instance.__init__(*args, **kwargs)
            if inspect.isawaitable(init):
                await init
            self.instance = instance
            self.callable = instance
            if recipe is not None:
                await self._start_asgi_app(recipe, cls_or_fn, instance)
        else:
            self.is_function = True
            self.callable = cls_or_fn
        serve_context._get_internal_replica_context().servable_object = self.instance
        self.inline_http = self.asgi_app is None and _is_sync_callable(self.callable)
        self.http_takes_request = self.asgi_app is not None or http_util.takes_request(self.callable)
        if self.config.get("user_config") is not None:
            await self.reconfigure(self.config["user_config"])
        await self._open_servers()
        return self.info()

    async def _start_asgi_app(self, recipe: dict, cls: type, instance: Any) -> None:
        """Build the ingress app (a factory runs here), let it answer handle errors as Ray does,
        and run its lifespan startup (on_startup hooks, lifespan context) before any request."""
        from raylite.serve._internal.ingress import Lifespan, build_app_from_recipe

        app = await build_app_from_recipe(recipe, cls, instance)
        if hasattr(app, "add_exception_handler"):
            from starlette.responses import Response

            from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

            def unavailable(_request: Any, exc: Exception) -> Any:
                if isinstance(exc, BackPressureError):  # as Ray: the shedding deployment's status and Retry-After
                    return Response(str(exc), status_code=exc.status_code,
                                    headers={k.decode(): v.decode() for k, v in exc.http_headers()})
                return Response(str(exc), status_code=503)

            for exc_type in (BackPressureError, DeploymentUnavailableError):
                app.add_exception_handler(exc_type, unavailable)
        self.lifespan = Lifespan(app)
        await self.lifespan.startup()
        self.asgi_app = app

    def info(self) -> dict:
        from raylite.runtime_context import get_runtime_context

        node_id = "local" if self.local else get_runtime_context().get_node_id()
        return {"replica_id": self.replica_id, "node_id": node_id,
                "pid": os.getpid(), "unix_path": self.unix_path, "tcp_addr": self.tcp_addr,
                "actor_name": f"SERVE_REPLICA::{self.replica_id}"}

    async def _open_servers(self) -> None:
        """The Unix socket (mode 0600, in the node's private socket directory) and, on a cluster,
        the TCP port on the node's IP (TLS where the cluster uses TLS). Both authenticate every
        connection (wire.ServerProtocol) before reading a request."""
        sec = self._security = client.state().security
        self._gate = wire.HandshakeGate(f"Serve replica {self.replica_id}", sec.max_pending_handshakes)
        loop = asyncio.get_running_loop()
        path = os.path.join(sec.socket_dir, f"serve-{secrets.token_hex(5)}")  # 16 chars, as Core's
        if os.path.exists(path):
            os.unlink(path)
        self._servers.append(await loop.create_unix_server(self._protocol, path, backlog=wire.LISTEN_BACKLOG))
        os.chmod(path, 0o600)
        self.unix_path = path
        if self.local:
            return
        from raylite.util import get_node_ip_address

        host = get_node_ip_address() or "127.0.0.1"
        tls: dict[str, Any] = {}
        if sec.server_ssl is not None:
            tls = {"ssl": sec.server_ssl, "ssl_handshake_timeout": sec.handshake_timeout_s}
        server = await loop.create_server(self._protocol, host=host, port=0, backlog=wire.LISTEN_BACKLOG,
                                          family=socket.AF_INET if ":" not in host else socket.AF_INET6, **tls)
        self._servers.append(server)
        self.tcp_addr = (host, server.sockets[0].getsockname()[1])

    def _protocol(self) -> wire.ServerProtocol:
        sec = self._security
        return wire.ServerProtocol(sec.token, self._gate, self._on_frame, self._on_lost,
                                   handshake_timeout_s=sec.handshake_timeout_s, max_frame_bytes=sec.max_frame_bytes)

    async def reconfigure(self, user_config: Any) -> None:
        self.config["user_config"] = user_config
        fn = getattr(self.instance, "reconfigure", None)
        if fn is None:
            if self.instance is not None or user_config is not None:
                raise TypeError(f"deployment {self.deployment_name!r} has a user_config but its class "
                                "defines no reconfigure(self, config) method; add one or drop user_config")
            return
        out = fn(*self._reconfigure_args(fn, user_config))
        if inspect.isawaitable(out):
            await out

    @staticmethod
    def _reconfigure_args(fn: Any, user_config: Any) -> tuple:
        """`reconfigure(self, user_config)` or, as Ray 2.50+, `reconfigure(self, user_config, rank)`."""
        try:
            params = [p for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        if len(params) >= 2:
            return user_config, serve_context._get_internal_replica_context().rank
        return (user_config,)

    async def update_rank(self, info: dict) -> None:
        """The controller's new view of this replica's rank, node rank and world size; a changed
        rank reaches a `reconfigure(self, user_config, rank)` as in Ray."""
        ctx = serve_context._get_internal_replica_context()
        if ctx is None:
            return
        old = ctx.rank
        ctx.rank = _rank(info)
        ctx.world_size = int(info.get("world_size", ctx.world_size))
        fn = getattr(self.instance, "reconfigure", None)
        if ctx.rank.rank != old.rank and fn is not None and len(self._reconfigure_args(fn, None)) == 2:
            out = fn(self.config.get("user_config"), ctx.rank)
            if inspect.isawaitable(out):
                await out

    async def check_health(self) -> None:
        fn = getattr(self.instance, "check_health", None)
        if fn is not None:
            out = fn()
            if inspect.isawaitable(out):
                await out

    async def metrics(self) -> dict:
        self.logger.flush()  # access lines reach the file within a metrics period
        out = self.stats.drain()
        out["ongoing"] = self.ongoing
        out["model_ids"] = self._model_ids()
        stats = await self._autoscaling_stats()
        if stats is not None:
            out["autoscaling_stats"] = stats
        return out

    async def _autoscaling_stats(self) -> dict | None:
        """The user's `record_autoscaling_stats()` ({metric: number}) for custom autoscaling
        policies; an error or a slow answer is logged and skipped (the policy sees no sample)."""
        fn = getattr(self.instance, "record_autoscaling_stats", None)
        if fn is None or not (self.config.get("_replica") or {}).get("custom_autoscaling"):
            return None
        try:
            out = fn()
            if inspect.isawaitable(out):
                out = await asyncio.wait_for(out, 5.0)  # well inside the controller poll's 10 s
            if not isinstance(out, dict):
                raise TypeError(f"record_autoscaling_stats() must return a dict of numbers, not {type(out).__name__}")
            return {str(k): float(v) for k, v in out.items()}
        except Exception:  # noqa: BLE001 - a bad metric must not break metrics or health
            self.logger.exception("record_autoscaling_stats() of deployment %s failed", self.deployment_name)
            return None

    def _model_ids(self) -> list[str]:
        if self.instance is None:
            return []
        try:
            from raylite.serve import multiplex

            return list(multiplex.loaded_model_ids(self.instance))
        except Exception:  # noqa: BLE001 - multiplexing is optional
            return []

    async def shutdown(self, wait_loop_s: float, timeout_s: float) -> None:
        """Stop taking requests, let the running ones finish (bounded), then call __del__."""
        self.draining = True
        deadline = time.monotonic() + timeout_s
        while self.ongoing and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, wait_loop_s or 0.05))
        for task in list(self.tasks.values()):
            task.cancel()
        for server in self._servers:
            server.close()
        if self.unix_path and os.path.exists(self.unix_path):
            os.unlink(self.unix_path)
        if self.lifespan is not None:
            await self.lifespan.shutdown()
        if self.instance is not None and hasattr(type(self.instance), "__del__"):
            try:
                out = self.instance.__del__()
                if inspect.isawaitable(out):
                    await out
            except Exception:  # noqa: BLE001
                self.logger.exception("__del__ of deployment %s raised", self.deployment_name)
            self.instance = None
        self.logger.flush()

    # ------------------------------------------------------------ request path
    def _on_lost(self, proto: wire.FrameProtocol, exc: BaseException | None) -> None:
        key = id(proto)
        for (pid, _rid), task in list(self.tasks.items()):
            if pid == key:
                task.cancel()

    def _on_frame(self, proto: wire.FrameProtocol, msg: tuple) -> None:
        if msg[0] == REQ:
            _, rid, kind, meta, payload = msg
            if self.draining or self.callable is None:
                proto.send((rid, R_REJECT, None, self.ongoing))
                return
            self.ongoing += 1
            if self.ongoing > self.max_ongoing:
                self.backlog.append((proto, rid, kind, meta, payload))
                return
            self._start(proto, rid, kind, meta, payload)
        elif msg[0] == MSG:
            session = self.websockets.get((id(proto), msg[1]))
            if session is not None:
                session.feed(msg[2])
        elif msg[0] == CANCEL:
            task = self.tasks.get((id(proto), msg[1]))
            if task is not None:
                task.cancel()
                return
            for item in self.backlog:
                if item[0] is proto and item[1] == msg[1]:
                    self.backlog.remove(item)
                    self.ongoing -= 1
                    proto.send((msg[1], R_ERR, cloudpickle.dumps(_cancelled(self.deployment_name)), self.ongoing))
                    break

    def _start(self, proto: wire.FrameProtocol, rid: int, kind: int, meta: tuple, payload: Any) -> None:
        """Run a request; while requests here take long, acknowledge it first (R_STARTED).

        Why acks only for slow handlers: an acknowledgement must be on the wire before the user
        code runs, which costs a write (and a wake-up of the proxy) per request -- measured 30%
        more CPU per request for a trivial handler. So a replica whose requests take under
        _ACK_AFTER_S on average (a moving average) sends none: if it is killed, every request
        it had not answered is resent elsewhere with ACK_FIRST -- exact for the unread ones; the
        one that was running (or that killed the replica) runs once more, acknowledged, so it
        can run at most twice and take down at most one more replica. WebSockets are always
        acknowledged (one write per session). Slower
        handlers, where a kill lands during user code, are acknowledged one by one (the write
        also carries earlier replies, and costs a few percent of the handler at most), so the
        request running at the kill fails with a clear error and the others are retried. A
        task's ack leaves with the flush already scheduled, before the task's first step.
        """
        if kind & ACK_FIRST:  # resent after its first replica died without acknowledging it
            kind ^= ACK_FIRST
            slow = True
        else:
            slow = self.cost_s >= _ACK_AFTER_S or kind == KIND_WS
        if kind == KIND_HTTP and self.inline_http:
            if slow:
                proto.send((rid, R_STARTED, None, self.ongoing))
                proto._flush()
            if self._run_http_inline(proto, rid, meta, payload):
                return
        elif slow:
            proto.send((rid, R_STARTED, None, self.ongoing))
        self._spawn(proto, rid, kind, meta, payload)

    def _spawn(self, proto: wire.FrameProtocol, rid: int, kind: int, meta: tuple, payload: Any) -> None:
        started = [False]
        task = self.loop.create_task(self._run(proto, rid, kind, meta, payload, started))
        self._track(proto, rid, task, started, meta, payload)

    def _track(self, proto: wire.FrameProtocol, rid: int, task: asyncio.Task, started: list,
               meta: tuple, payload: Any) -> None:
        """Index a request's task for CANCEL, and settle a request cancelled before its task's
        first step: its coroutine then never runs, so neither does the `finally` that gives its
        slot back, answers it and starts the next request of the backlog (a client that gave up
        on a request the moment it left the backlog would hold the slot for good, and every
        request after it would wait forever)."""
        key = (id(proto), rid)
        self.tasks[key] = task

        def done(_t: asyncio.Task) -> None:
            self.tasks.pop(key, None)
            if not started[0]:
                self.ongoing -= 1
                if not proto.closed:
                    proto.send((rid, R_ERR, cloudpickle.dumps(_cancelled(self.deployment_name)), self.ongoing))
                self._finish(time.perf_counter(), 499, meta[0], payload, meta[5], meta[1])

        task.add_done_callback(done)

    async def _run(self, proto: wire.FrameProtocol, rid: int, kind: int, meta: tuple, payload: Any,
                   started: list) -> None:
        started[0] = True
        start = time.perf_counter()
        request_id, route, app_name, model_id, stream, method_name = meta
        serve_context._serve_request_context.set(
            serve_context.RequestContext(route, request_id, app_name, model_id))
        status = 200
        try:
            if kind == KIND_CALL:
                status = await self._run_call(proto, rid, method_name, payload, stream)
            elif kind == KIND_WS:
                status = await self._run_ws(proto, rid, payload, route)
            else:
                status = await self._run_http(proto, rid, payload, route)
        except asyncio.CancelledError:
            status = 499
            if not proto.closed:
                proto.send((rid, R_ERR, cloudpickle.dumps(_cancelled(self.deployment_name)), self.ongoing - 1))
        finally:
            self.ongoing -= 1
            self._finish(start, status, request_id, payload if kind != KIND_CALL else None, method_name, route)

    async def _run_call(self, proto: wire.FrameProtocol, rid: int, method_name: str, payload: bytes,
                        stream: bool) -> int:
        try:
            args, kwargs = cloudpickle.loads(payload)
            fn = self._method(method_name)
            result = fn(*args, **kwargs)
            if stream:
                await self._stream_items(proto, rid, result)
                return 200
            if inspect.isawaitable(result):
                result = await result
            try:
                data = cloudpickle.dumps(result)
            except Exception as e:  # noqa: BLE001
                raise TypeError(f"deployment {self.deployment_name!r} method {method_name!r} returned a value "
                                f"of type {type(result).__name__} that cannot be serialized ({e}); return "
                                "plain data (dict, list, str, numbers, numpy arrays)") from None
            proto.send((rid, R_OK, data, self.ongoing - 1))
            return 200
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            proto.send((rid, R_ERR, self._pack_error(e, method_name), self.ongoing - 1))
            return 500

    async def _stream_items(self, proto: wire.FrameProtocol, rid: int, result: Any) -> None:
        if inspect.isawaitable(result):
            result = await result
        if inspect.isasyncgen(result):
            async for item in result:
                proto.send((rid, R_CHUNK, cloudpickle.dumps(item), self.ongoing))
        elif inspect.isgenerator(result) or hasattr(result, "__next__"):
            for item in result:
                proto.send((rid, R_CHUNK, cloudpickle.dumps(item), self.ongoing))
                await asyncio.sleep(0)
        else:
            raise TypeError(f"handle.options(stream=True) needs a generator method, but deployment "
                            f"{self.deployment_name!r} returned {type(result).__name__}")
        proto.send((rid, R_END, None, self.ongoing - 1))

    def _method(self, method_name: str) -> Any:
        if self.is_function:
            return self.callable
        try:
            return getattr(self.instance, method_name)
        except AttributeError:
            raise AttributeError(f"deployment {self.deployment_name!r} has no method {method_name!r}") from None

    def _pack_error(self, e: BaseException, method_name: str) -> bytes:
        from raylite.exceptions import RayTaskError

        tb = traceback.format_exc()
        self.logger.error("request to %s.%s failed:\n%s", self.deployment_name, method_name, tb)
        err = RayTaskError(f"{self.deployment_name}.{method_name}", tb, e, pid=os.getpid())
        try:
            return cloudpickle.dumps(err.as_instanceof_cause())
        except Exception:  # noqa: BLE001 - the cause itself does not pickle
            return cloudpickle.dumps(RayTaskError(f"{self.deployment_name}.{method_name}", tb, None,
                                                  pid=os.getpid()))

    async def _run_http(self, proto: wire.FrameProtocol, rid: int, payload: tuple, route: str) -> int:
        scope, body = http_util.build_scope(payload, route)
        if self.lifespan is not None and self.lifespan.state:
            scope["state"] = dict(self.lifespan.state)
        sender = http_util.WireSender(proto, rid, self)
        receive = http_util.make_receive(body)
        try:
            if self.asgi_app is not None:
                await self.asgi_app(scope, receive, sender)
            else:
                result = await self._call_http_callable(scope, receive)
                await http_util.send_result(result, scope, receive, sender, self.deployment_name)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            self.logger.error("request %s failed:\n%s", scope.get("path"), traceback.format_exc())
            if sender.started:
                sender.abort()
                return 500
            status, headers, body_text = http_util.error_reply(e)
            proto.send((rid, R_OK, (status, headers, body_text), self.ongoing - 1))
            return status
        return sender.status

    async def _run_ws(self, proto: wire.FrameProtocol, rid: int, payload: tuple, route: str) -> int:
        session = ws_session.WebSocketSession(proto, rid, self)
        key = (id(proto), rid)
        self.websockets[key] = session
        try:
            return await session.run(self.asgi_app, payload, route, self.deployment_name, self.logger)
        finally:
            del self.websockets[key]

    def _run_http_inline(self, proto: wire.FrameProtocol, rid: int, meta: tuple, payload: tuple) -> bool:
        """A sync callable returning plain data: run it right here, no task, one reply frame.
        Returns False (nothing done) when the request needs the async path."""
        from starlette.requests import Request

        start = time.perf_counter()
        request_id, route, app_name, model_id, _stream, method_name = meta
        token = serve_context._serve_request_context.set(
            serve_context.RequestContext(route, request_id, app_name, model_id))
        try:
            scope, body = http_util.build_scope(payload, route)
            try:
                if self.http_takes_request:
                    result = self.callable(Request(scope, http_util.make_receive(body)))
                else:
                    result = self.callable()
            except Exception as e:  # noqa: BLE001
                self.logger.error("request %s failed:\n%s", scope.get("path"), traceback.format_exc())
                reply = http_util.error_reply(e)
            else:
                if not http_util.is_plain(result):
                    self._start_http_result(proto, rid, meta, payload, result, scope, start)
                    return True
                reply = http_util.encode_result(result, self.deployment_name)
        finally:
            serve_context._serve_request_context.reset(token)
        self.ongoing -= 1
        proto.send((rid, R_OK, reply, self.ongoing))
        self._finish(start, reply[0], request_id, payload, method_name, route)
        return True

    def _start_http_result(self, proto: wire.FrameProtocol, rid: int, meta: tuple, payload: tuple, result: Any,
                           scope: dict, start: float) -> None:
        """Finish a Response / generator result of an inline call on a task (it needs ASGI sends)."""
        async def send() -> None:
            started[0] = True
            sender = http_util.WireSender(proto, rid, self)
            status = 500
            try:
                await http_util.send_result(result, scope, http_util.make_receive(b""), sender,
                                            self.deployment_name)
                status = sender.status
            except asyncio.CancelledError:
                status = 499
            except BaseException:  # noqa: BLE001
                self.logger.error("response of %s failed:\n%s", scope.get("path"), traceback.format_exc())
                if sender.started:
                    sender.abort()
                else:
                    proto.send((rid, R_OK, (500, [], b"Internal Server Error"), self.ongoing - 1))
            finally:
                self.ongoing -= 1
                self._finish(start, status, meta[0], payload, meta[5], meta[1])

        started = [False]
        self._track(proto, rid, self.loop.create_task(send()), started, meta, payload)

    def _finish(self, start: float, status: int, request_id: str, payload: Any, method_name: str,
                route: str) -> None:
        while self.backlog:
            item = self.backlog.popleft()
            if not item[0].closed:
                self._start(*item)
                break
            self.ongoing -= 1
        elapsed = time.perf_counter() - start
        self.cost_s += (elapsed - self.cost_s) * 0.25
        self.stats.record(elapsed, status >= 500)
        if self.logger.access_enabled:
            self.logger.access(request_id, payload, method_name, route, status, elapsed)

    async def _call_http_callable(self, scope: dict, receive: Any) -> Any:
        from starlette.requests import Request

        result = self.callable(Request(scope, receive)) if self.http_takes_request else self.callable()
        if inspect.isawaitable(result):
            result = await result
        return result


def _rank(info: dict) -> serve_context.ReplicaRank:
    return serve_context.ReplicaRank(rank=int(info.get("rank", 0)), node_rank=int(info.get("node_rank", 0)),
                                     local_rank=int(info.get("local_rank", 0)))


def _is_sync_callable(target: Any) -> bool:
    fn = target if inspect.isfunction(target) else getattr(type(target), "__call__", None)  # noqa: B004
    return fn is not None and inspect.isfunction(fn) and not (
        inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn))


def _cancelled(deployment: str) -> BaseException:
    from raylite.serve.exceptions import RequestCancelledError

    return RequestCancelledError(f"request to deployment {deployment!r} was cancelled")


class ServeReplica:
    """The Core actor: forwards the controller's calls onto the replica's own loop."""

    def __init__(self, app_name: str, deployment_name: str, replica_id: str, definition: bytes,
                 init_args: bytes, config: dict) -> None:
        self._impl = ReplicaImpl(app_name, deployment_name, replica_id, definition, init_args, config)

    async def _on_loop(self, coro: Any) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._impl.loop)
        return await asyncio.wrap_future(fut)

    async def initialize(self) -> dict:
        return await self._on_loop(self._impl.initialize())

    async def reconfigure(self, user_config: Any) -> None:
        return await self._on_loop(self._impl.reconfigure(user_config))

    async def check_health(self) -> None:
        return await self._on_loop(self._impl.check_health())

    async def get_metrics(self) -> dict:
        return await self._on_loop(self._impl.metrics())

    async def update_rank(self, info: dict) -> None:
        return await self._on_loop(self._impl.update_rank(info))

    async def get_info(self) -> dict:
        return self._impl.info()

    async def prepare_for_shutdown(self, wait_loop_s: float = 2.0, timeout_s: float = 20.0) -> None:
        return await self._on_loop(self._impl.shutdown(wait_loop_s, timeout_s))

    async def handle_request(self, method_name: str, args: tuple, kwargs: dict) -> Any:
        """The Core-call fallback path (used by DeploymentResponse._to_object_ref)."""
        impl = self._impl

        async def _c() -> Any:
            out = impl._method(method_name)(*args, **kwargs)
            if inspect.isawaitable(out):
                out = await out
            return out

        return await self._on_loop(_c())


def replica_class(app_name: str, deployment_name: str) -> type:
    """A per-deployment subclass, so Core's log prefix reads `ServeReplica:app:deployment`."""
    name = f"ServeReplica:{app_name}:{deployment_name}"
    cls = type(name, (ServeReplica,), {"__module__": __name__})
    cls.__qualname__ = name
    return cls
