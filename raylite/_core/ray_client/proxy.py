"""The proxy driver of one Ray Client connection (`python -m raylite._core.ray_client.proxy`).

Started by the head's client server (client_server.py) with the connection's socket, already
authenticated. It joins the cluster as an ordinary driver -- its own job, attached to the head
machine's node -- once the remote side asks ("init"), and then carries out the remote program's
API calls with its CoreClient. It owns every object and actor the remote program creates; when
the connection ends it shuts its driver down and exits, so the job ends and its non-detached
actors and objects go.

Methods (ClientCall.method -> args -> reply value); "-" means sent without a request id:
    init        [namespace, python "X.Y", raylite version, runtime_env, [host, *argv]] -> driver facts
    submit -    [spec wire, pickled retry_exceptions]; spec.args = [meta, buffers] of (args, kwargs)
    actor       [spec wire, get_if_exists]                           -> encoded RegisterActorReply
    put         [meta, buffers]                                      -> object id
    get         [[oid, owner]..., timeout]                           -> [meta, buffers, granted ids]
    wait        [[oid, owner]..., num_returns, timeout, fetch_local] -> ready ids
    waitg       [[["r", oid, owner] | ["g", task id, index]]..., num_returns, timeout] -> ready indexes
    release -   [[oid, grants]...]
    gen_next    [task id, index, timeout]                            -> [oid, owner] | None
    gen_len     [task id] -> int;   gen_drop - [task id]
    cancel      [oid, owner, force, recursive];   kill [actor id, no_restart];   aos - [actor id]
    export -    [function id, pickled function]
    head, node  [encoded request] -> encoded reply;   head_send - [encoded message]

Grants: each time this process hands an object id to the remote side (a task's returns, a
put, refs inside a value it sends) it counts one grant and keeps a ref alive; the remote side
returns the grants it received once its last ref to the id is gone ("release"). Counting
grants, not refs, keeps an id alive when a new grant crosses a release on the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import os
import pickle
import socket
import sys
import threading
from typing import Any

from raylite._core import protocol as P
from raylite._core import runtime
from raylite._core import serialization as ser
from raylite._core.client.records import ObjectEntry
from raylite._core.client.refs import ObjectRef, ObjectRefGenerator
from raylite._core.ray_client.remote_client import raylite_version, wire_value
from raylite._core.task_spec import KIND_ACTOR_CALL, TaskSpec
from raylite._core.transport import rpc

log = logging.getLogger("raylite.client_proxy")


def pack_error(exc: BaseException) -> list:
    """[meta, buffers] of `exc` pickled; an exception that will not pickle travels as a
    RaySystemError carrying its type name and text."""
    try:
        return ser.serialize(exc, kind=ser.KIND_ERROR).to_inline()
    except Exception:  # noqa: BLE001
        from raylite.exceptions import RaySystemError

        return ser.serialize(RaySystemError(f"{type(exc).__name__}: {exc}"), kind=ser.KIND_ERROR).to_inline()


class Proxy:
    """Carries out one remote program's calls with this process's CoreClient."""

    def __init__(self, conn: rpc.Connection, head_address: str) -> None:
        self.conn = conn
        self.head_address = head_address
        self.client: Any = None
        self.init_asked = False  # the deadline before `init` stops counting once it arrived
        self.holds: dict[bytes, list] = {}  # oid -> [ObjectRef, grants]
        self.gens: dict[bytes, ObjectRefGenerator] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="raylite-client-proxy")
        self.loop = asyncio.get_running_loop()
        self.blocking = {"init": self._init, "wait": self._wait, "waitg": self._waitg, "gen_next": self._gen_next}
        self.inline = {"submit": self._submit, "actor": self._actor, "put": self._put,
                       "release": self._release, "gen_len": self._gen_len,
                       "gen_drop": self._gen_drop, "cancel": self._cancel, "kill": self._kill,
                       "aos": self._aos, "export": self._export, "head_send": self._head_send}

    # ------------------------------------------------------------ dispatch
    def on_call(self, conn: rpc.Connection, msg: P.ClientCall, rid: int) -> Any:
        name = msg.method
        if (self.client is None) != (name == "init"):
            return self._error(rid, RuntimeError("'init' comes first, once per connection"))
        if name == "init":
            self.init_asked = True
        if name in ("head", "node"):
            return self._forward(name, msg.args[0])
        args = msg.args
        if name in ("get", "wait", "waitg"):
            # the refs are taken now, in order with the releases behind this call (a release
            # handled before a task or thread starts would free a value it is about to read)
            args = [self._take(name, args[0]), *args[1:]]
        if name == "get":
            return self._get(rid, *args)
        if name in self.blocking:  # may wait long: a thread, so later calls are not held up
            return self._in_thread(self.blocking[name], args, rid)
        fn = self.inline.get(name)
        if fn is None:
            return self._error(rid, ValueError(f"unknown Ray Client method {name!r}"))
        # in order, on this loop: a get() that follows a submit() finds the task submitted
        try:
            value = fn(*msg.args)
        except Exception as e:  # noqa: BLE001
            return self._error(rid, e)
        return P.ClientCallReply(True, value) if rid else None

    def _error(self, rid: int, exc: BaseException) -> P.ClientCallReply | None:
        if not rid:
            log.warning("Ray Client call failed: %r", exc)
            return None
        return P.ClientCallReply(False, pack_error(exc))

    async def _in_thread(self, fn, args: list, rid: int) -> P.ClientCallReply | None:
        try:
            value = await self.loop.run_in_executor(self.pool, fn, *args)
        except Exception as e:  # noqa: BLE001
            return self._error(rid, e)
        return P.ClientCallReply(True, value)

    async def _forward(self, where: str, encoded: bytes) -> P.ClientCallReply:
        msg, _ = P.decode(encoded)
        target = self.client.head if where == "head" else self.client.node
        try:
            reply = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                target.request(msg), self.client.loop))
        except Exception as e:  # noqa: BLE001
            return P.ClientCallReply(False, pack_error(e))
        return P.ClientCallReply(True, P.encode(reply, 0))

    # ------------------------------------------------------------ grants
    def grant(self, ref: ObjectRef) -> list:
        held = self.holds.get(ref._id)
        if held is None:
            self.holds[ref._id] = [ref, 1]
        else:
            held[1] += 1
        return [ref._id, ref._owner]

    def _release(self, items: list) -> None:
        for oid, n in items:
            held = self.holds.get(oid)
            if held is not None:
                held[1] -= n
                if held[1] <= 0:
                    del self.holds[oid]

    def ref(self, oid: bytes, owner: str) -> ObjectRef:
        held = self.holds.get(oid)
        return held[0] if held is not None else ObjectRef(oid, owner, _borrowed=True)

    # ------------------------------------------------------------ calls
    def _init(self, namespace: str, python: str, version: str, runtime_env: dict, program: list) -> dict:
        mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if python != mine:
            raise RuntimeError(f"the Ray Client server runs Python {mine} and this program Python {python}: "
                               "functions and values pickled by one do not load in the other. Use Python "
                               f"{mine} on this machine.")
        from raylite._core.cluster import driver

        ours = raylite_version()
        if version != ours:
            raise RuntimeError(f"the cluster runs raylite {ours} and this program raylite {version}; "
                               f"install raylite {ours} here.")
        # the job's entrypoint (`raylite list jobs`, the dashboard) names the remote program
        sys.argv = [f"(Ray Client from {program[0]})", *[str(a) for a in program[1:]]]
        head = self.head_address
        address = head if head.startswith("unix://") else head[len("tcp://"):]
        info = driver.init_remote(address, namespace=namespace, log_to_driver=True)
        client = runtime.client()
        client.log_handler = self._forward_logs
        # the node (the head's daemon) is gone: so is the cluster this program used; tell it at once
        client.node.on_close.append(lambda _c: self.loop.call_soon_threadsafe(self.conn.close))
        self.client = client
        return {"job_id": client.job_id, "node_id": client.node_id, "node_ip": client.node_ip,
                "worker_id": client.worker_id, "address": client.address, "namespace": client.namespace,
                "head_address": info.head_address, "dashboard_url": info.dashboard_url,
                "session_dir": client.session_dir, "pid": os.getpid()}

    def _forward_logs(self, msg: P.LogLines) -> None:
        with contextlib.suppress(Exception):
            self.loop.call_soon_threadsafe(self._send_quietly, msg)

    def _send_quietly(self, msg: P.Message) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(msg)

    def _repack(self, wire: list) -> tuple[TaskSpec, list]:
        """The remote side pickled (args, kwargs) whole; pack them as this driver would (refs
        become placeholders, large arguments go to the object store)."""
        spec = TaskSpec.from_wire(wire)
        meta, buffers = spec.args
        args, kwargs = ser.deserialize(meta, buffers)
        payload, arg_refs, pinned = self.client.pack_args(args, kwargs, spec.display_name())
        return spec.replace(args=payload, arg_refs=arg_refs), pinned

    def _submit(self, wire: list, retry: bytes) -> None:
        spec = None
        try:
            spec, pinned = self._repack(wire)
            if spec.kind == KIND_ACTOR_CALL:
                result = self.client.submit_actor_task(spec, pinned)
            else:
                result = self.client.submit_task(spec, pinned, pickle.loads(retry) if retry else False)
        except Exception as e:  # noqa: BLE001  the error becomes the value of the task's returns
            self._fail_returns(spec or TaskSpec.from_wire(wire), e)
            return
        if isinstance(result, ObjectRefGenerator):
            self.gens[spec.task_id] = result
            self.grant(result.completed())  # the remote generator's completion ref
        elif isinstance(result, ObjectRef):
            self.grant(result)
        elif isinstance(result, list):
            for ref in result:
                self.grant(ref)

    def _fail_returns(self, spec: TaskSpec, exc: BaseException) -> None:
        """The task never ran: its returns (a generator's: its completion) hold the error."""
        client = self.client
        payload = pack_error(exc)
        for oid in spec.return_ids():
            oid = bytes(oid)
            with client._lock:
                client.refs.own(oid)
                client.refs.add_local(oid, client.address)
                client.entries[oid] = ObjectEntry("e", payload)
            self.grant(ObjectRef.counted(oid, client.address, client))

    def _actor(self, wire: list, get_if_exists: bool) -> bytes:
        spec, _pinned = self._repack(wire)
        return P.encode(self.client.register_actor(spec, get_if_exists), 0)

    def _put(self, meta: bytes, buffers: list) -> list:
        return self.grant(self.client.put(ser.deserialize(meta, buffers)))

    def _take(self, name: str, items: list) -> list:
        """A call's refs (and, for waitg, generator views) as objects of this process."""
        if name != "waitg":
            return [self.ref(oid, owner) for oid, owner in items]
        objs: list = []
        for kind, key, extra in items:
            if kind == "g":
                gen = object.__new__(ObjectRefGenerator)  # a view: no client, so no drop on __del__
                gen._task_id, gen._index, gen._client, gen._completion = key, extra, None, None
                objs.append(gen)
            else:
                objs.append(self.ref(key, extra))
        return objs

    async def _get(self, rid: int, refs: list, timeout: float | None) -> P.ClientCallReply | None:
        """Like the driver's get(): wait for every value (no thread waits: the CoreClient
        resolves the futures), then raise the first error in list order, or send them all."""
        futures = [self.client.future_of(ref) for ref in refs]
        waiting = [asyncio.wrap_future(f) for f in futures]
        try:
            done, pending = await asyncio.wait(waiting, timeout=timeout) if waiting else (set(), set())
            if pending:
                for f in futures:
                    f.cancel()
                from raylite.exceptions import GetTimeoutError

                raise GetTimeoutError(f"get() timed out after {timeout}s: {len(pending)} of {len(futures)} "
                                      "objects were not ready. Raise the timeout, or check `raylite status` "
                                      "for tasks waiting on resources.")
            values = [w.result() for w in waiting]
            so = ser.serialize(values, what="the values get() returns to the Ray Client")
        except Exception as e:  # noqa: BLE001
            return P.ClientCallReply(False, pack_error(e))
        granted = [self.grant(r)[0] for r in so.contained_refs]  # on this loop, in order with releases
        (meta, buffers), size = wire_value(so)
        if not self.conn.is_closed():  # sent here, to pack a large value once (P.encode_sized)
            self.conn.send(P.ClientCallReply(True, [meta, buffers, granted]), -rid, size_hint=size)
        return None

    def _wait(self, refs: list, num_returns: int, timeout: float | None, fetch_local: bool) -> list:
        ready, _ = self.client.wait(refs, num_returns, timeout, fetch_local)
        return [r._id for r in ready]

    def _waitg(self, objs: list, num_returns: int, timeout: float | None) -> list:
        ready, _ = self.client.wait_with_generators(objs, num_returns, timeout)
        ready_ids = {id(o) for o in ready}
        return [i for i, o in enumerate(objs) if id(o) in ready_ids]

    def _gen_next(self, task_id: bytes, index: int, timeout: float | None) -> list | None:
        ref = self.client.next_generator_item(task_id, index, timeout)
        if ref is None:
            return None
        return asyncio.run_coroutine_threadsafe(self._grant_one(ref), self.loop).result()

    async def _grant_one(self, ref: ObjectRef) -> list:
        return self.grant(ref)  # on this loop, in order with the releases that arrive there

    def _gen_len(self, task_id: bytes) -> int:
        return self.client.generator_length(task_id)

    def _gen_drop(self, task_id: bytes) -> None:
        self.gens.pop(task_id, None)

    def _cancel(self, oid: bytes, owner: str, force: bool, recursive: bool) -> None:
        self.client.cancel(self.ref(oid, owner), force, recursive)

    def _kill(self, actor_id: bytes, no_restart: bool) -> None:
        self.client.kill_actor(actor_id, no_restart)

    def _aos(self, actor_id: bytes) -> None:
        self.client.call_soon(self.client.actor_out_of_scope, actor_id)

    def _export(self, function_id: bytes, pickled: bytes) -> None:
        self.client.export_function(function_id, pickled)

    def _head_send(self, encoded: bytes) -> None:
        self.client.head_send(P.decode(encoded)[0])

    def close(self) -> None:
        self.holds.clear()
        self.gens.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)


async def serve(fd: int, head_address: str) -> None:
    from raylite._core.config import get_config

    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    conn = rpc.Connection({}, token=get_config().token, role="ray-client-proxy")
    conn.peer_role = "Ray Client"
    conn._handshake_done()  # the client server checked the Hello: full-size frames from now on
    proxy = Proxy(conn, head_address)
    conn.handlers[P.ClientCall] = proxy.on_call
    await loop.connect_accepted_socket(lambda: conn, sock)

    def init_deadline() -> None:  # a session that never says `init` holds a process for nothing
        if not proxy.init_asked and not conn.is_closed():
            log.warning("Ray Client proxy: no 'init' within %ss of connecting; closing the session",
                        get_config().ray_client_init_timeout_s)
            conn.close()

    timer = loop.call_later(get_config().ray_client_init_timeout_s, init_deadline)
    await conn.closed
    timer.cancel()
    proxy.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="raylite-client-proxy")
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--head-address", required=True)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        try:
            import uvloop  # type: ignore

            uvloop.run(serve(args.fd, args.head_address))
        except ImportError:
            asyncio.run(serve(args.fd, args.head_address))
    finally:
        from raylite._core.cluster import driver

        done = threading.Event()

        def stop() -> None:
            with contextlib.suppress(Exception):
                driver.shutdown()
            done.set()

        threading.Thread(target=stop, daemon=True).start()
        done.wait(10)
        os._exit(0)


if __name__ == "__main__":
    main()
