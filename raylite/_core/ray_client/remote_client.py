"""The driver side of Ray Client: `raylite.init("ray://HOST:10001")`.

A RemoteClient stands where a driver's CoreClient stands (runtime.client()), so the public
API -- and Data, Train and Serve above it -- runs unchanged; but instead of leasing workers and
mapping shared memory it sends each call over one TCP connection to its proxy driver on the
head (client_proxy.py, which lists the calls) and gets values back pickled. See
client_server.py for the architecture and docs/clusters.md ("Ray Client") for its limits.

Ordering: every call and every release goes into one outbox (`_outbox`), from any thread, and
leaves through this process's I/O loop in the order it went in; the proxy carries them out in
arrival order, so a get() always finds the task it waits for submitted, and a ref passed to a
task and dropped at once (`f.remote(b); del b`) is released only after that submission. (A
release once had its own queue, drained by a callback scheduled earlier, and overtook it.) Submissions need no answer (their return ids are derived
from the task id), which keeps a loop of .remote() calls from paying a round trip each.

References: the proxy keeps one ref alive per *grant* (an id it handed here); this side counts
its live ObjectRefs per id and, when the last goes, returns that id's grants ("release").
Grants are taken under `_lock` together with the ObjectRefs they back, so a release never
returns a grant whose ref is still being built.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import pickle
import socket
import sys
import threading
from typing import Any

from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.head_calls import HeadCalls
from raylite._core.client.refs import ObjectRef, ObjectRefGenerator
from raylite._core.config import Config
from raylite._core.core_api import CoreAPI
from raylite._core.ids import ObjectID, TaskID
from raylite._core.task_spec import DYNAMIC, STREAMING, TaskSpec
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionBrokenError, HandshakeError, RemoteError
from raylite._core.transport.loops import new_event_loop

_log = logging.getLogger(__name__)
_NO_ARGS = ser.serialize(((), {})).to_inline()


def wire_value(so: ser.SerializedObject) -> tuple[list, int]:
    """([meta, buffers], their size in bytes) for a ClientCall: contiguous buffers travel as
    views (msgpack copies them once, into the frame), others as bytes."""
    buffers: list = []
    for b in so.buffers:
        try:
            buffers.append(b.raw() if isinstance(b, pickle.PickleBuffer) else b)
        except BufferError:  # not contiguous
            buffers.append(memoryview(b).tobytes())
    return [so.meta, buffers], so.total_bytes()


def raylite_version() -> str:
    """The installed raylite's version (read from the loaded package: `raylite` imports this
    module's importers, so an import statement here would be a cycle)."""
    return sys.modules["raylite"].__version__


class RayClientError(ConnectionError):
    """The Ray Client connection failed or was refused; the message says why and what to do."""


class _RemoteHead:
    """`client.head` for code that awaits head requests on the client's loop."""

    def __init__(self, client: RemoteClient, where: str) -> None:
        self._client = client
        self._where = where

    async def request(self, msg: P.Message, timeout_s: float | None = None) -> Any:
        value = await asyncio.wrap_future(self._client._call(self._where, [P.encode(msg, 0)]))
        return P.decode(value)[0]

    def send(self, msg: P.Message) -> None:
        self._client._send("head_send", [P.encode(msg, 0)])


class RemoteClient(HeadCalls, CoreAPI):
    """The Core API engine of a Ray Client driver (see the module docstring)."""

    kind = "driver"

    def __init__(self, config: Config, hostport: str, token: str) -> None:
        self.config = config
        self.hostport = hostport
        self.token = token
        self.loop: asyncio.AbstractEventLoop | None = None
        self.conn: rpc.Connection | None = None
        self.head = _RemoteHead(self, "head")
        self.node = _RemoteHead(self, "node")
        self.task_events = None
        self.log_handler = None
        self.blocked_hook = None
        self.extra_handlers: dict = {}
        self._closed = False
        self._lock = threading.RLock()
        self._counts: dict[bytes, int] = {}  # live ObjectRefs here, per id
        self._grants: dict[bytes, int] = {}  # grants received, per id (module docstring)
        # calls (functions to run on the loop) and deletions (ids, as bytes), in program order
        self._outbox: collections.deque = collections.deque()
        self._pump_armed = False
        self._pumping = False
        self._exported: set[bytes] = set()
        self._promises: dict[bytes, concurrent.futures.Future] = {}
        self._thread: threading.Thread | None = None
        self.current_task_id = b""

    # ------------------------------------------------------------ life cycle
    def start(self, namespace: str, runtime_env: dict) -> dict:
        ready: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            loop = new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                loop.run_until_complete(self._connect())
            except BaseException as e:  # noqa: BLE001
                ready.set_exception(e)
                loop.close()
                return
            ready.set_result(None)
            loop.run_forever()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="raylite-ray-client", daemon=True)
        self._thread.start()
        ready.result()
        python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        try:
            info = self._result(self._call("init", [namespace, python, raylite_version(), runtime_env,
                                                    [socket.gethostname(), *sys.argv]]), 120)
        except RemoteError as e:
            self.shutdown()
            if e.error_type == "NotImplementedError":
                raise RayClientError(
                    f"{self.hostport} answered, but it is not a Ray Client server: it is another raylite "
                    "port (a head's or node's RPC port?). Use the head's --ray-client-server-port (10001 "
                    f"by default): ray://{self.hostport.rsplit(':', 1)[0]}:10001, or, from a machine in "
                    f"the cluster, init(address='{self.hostport}').") from None
            raise
        except BaseException:
            self.shutdown()
            raise
        for key in ("job_id", "node_id", "node_ip", "worker_id", "address", "namespace", "head_address",
                    "session_dir"):
            setattr(self, key, info[key])
        return info

    async def _connect(self) -> None:
        handlers = {P.LogLines: self._on_log_lines}
        try:
            self.conn = await rpc.connect(f"tcp://{self.hostport}", handlers, token=self.token,
                                          role="ray-client", timeout_s=self.config.handshake_timeout_s + 5)
        except HandshakeError as e:
            why = str(e).split("refused the connection: ", 1)[-1].split(". Pass the", 1)[0]
            if "maximum of" in why:  # authenticated, but the head serves all the sessions it may
                raise RayClientError(f"the Ray Client server at ray://{self.hostport} turned this "
                                     f"program away: {why}.") from None
            raise RayClientError(
                f"the Ray Client server at ray://{self.hostport} refused this program: {why}. Set the "
                "cluster's token in RAYLITE_TOKEN, or RAY_AUTH_TOKEN with RAY_AUTH_MODE=token (`raylite "
                "start --head` prints where its token file is), and use the same raylite version as "
                "the cluster.") from None
        except ConnectionBrokenError as e:
            raise RayClientError(
                f"cannot reach a Ray Client server at ray://{self.hostport}: {e.__cause__ or e}. Check "
                "that the head runs (`raylite start --head`), that this is its --ray-client-server-port "
                "(10001 by default) and that the port is open from this machine.") from None
        self.conn.on_close.append(self._on_lost)

    def _on_lost(self, conn: rpc.Connection) -> None:
        if not self._closed:
            print(f"raylite: lost the connection to the Ray Client server at ray://{self.hostport}; its "
                  "job has ended. Call raylite.shutdown() and raylite.init() again to reconnect.",
                  file=sys.stderr)

    def _on_log_lines(self, conn: rpc.Connection, msg: P.LogLines, rid: int) -> None:
        if self.log_handler is not None:
            self.log_handler(msg)

    def shutdown(self) -> None:
        """Close the connection: the proxy ends this program's job (non-detached actors go)."""
        if self._closed:
            return
        self._closed = True
        loop = self.loop
        if loop is None or loop.is_closed():
            return

        def stop() -> None:
            if self.conn is not None:
                self.conn.close()
            loop.call_later(0.05, loop.stop)

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    # ------------------------------------------------------------ calls
    def _call(self, method: str, args: list, size_hint: int = 0) -> concurrent.futures.Future:
        """Send a call from any thread (in program order); its answer resolves the future.
        `size_hint`: the bytes of the values in `args`, when large."""
        out: concurrent.futures.Future = concurrent.futures.Future()

        def start() -> None:
            try:
                fut = self.conn.request_future(P.ClientCall(method, args), size_hint=size_hint)
            except Exception as e:  # noqa: BLE001
                out.set_exception(self._broken(e))
                return
            fut.add_done_callback(finish)

        def finish(fut: asyncio.Future) -> None:
            exc = fut.exception()
            if exc is not None:
                out.set_exception(self._broken(exc) if not isinstance(exc, RemoteError) else exc)
                return
            reply = fut.result()
            if reply.ok:
                out.set_result(reply.value)
            else:
                out.set_exception(ser.from_inline(reply.value))

        self._on_loop(start)
        return out

    def _send(self, method: str, args: list, size_hint: int = 0) -> None:
        """A call that needs no answer, in program order."""
        def go() -> None:
            with contextlib.suppress(Exception):
                self.conn.send(P.ClientCall(method, args), size_hint=size_hint)
        self._on_loop(go)

    def _on_loop(self, fn: Any) -> None:
        """Run `fn` on the loop after everything put in the outbox before it."""
        if self._closed or self.loop is None:
            raise RayClientError(f"this Ray Client connection (ray://{self.hostport}) is closed; call "
                                 "raylite.init('ray://...') again.")
        self._outbox.append(fn)
        if threading.current_thread() is self._thread:  # at once, after what waits before it
            if not self._pumping:
                self._pump()
            return
        self._arm()

    def _arm(self) -> None:
        """Make sure a pump is scheduled on the loop."""
        if not self._pump_armed:
            self._pump_armed = True
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing will leave
                self.loop.call_soon_threadsafe(self._pump)

    def _pump(self) -> None:
        """On the loop: carry out the outbox in order. Consecutive deletions become one release
        message, sent before the call that follows them. The armed flag drops before reading, so
        an item added meanwhile schedules another pump rather than being missed."""
        self._pump_armed = False
        self._pumping = True
        try:
            deleted: list[bytes] = []
            while self._outbox:
                item = self._outbox.popleft()
                if isinstance(item, bytes):
                    deleted.append(item)
                    continue
                if deleted:
                    self._release(deleted)
                    deleted = []
                try:
                    item()
                except Exception:  # one failed call must not hold back the ones after it
                    if not self._closed:
                        _log.exception("raylite: a Ray Client call failed before it was sent")
            if deleted:
                self._release(deleted)
        finally:
            self._pumping = False

    def _broken(self, exc: BaseException) -> BaseException:
        if isinstance(exc, (ConnectionBrokenError, rpc.ConnectionClosedError)):
            err = RayClientError(f"the connection to the Ray Client server at ray://{self.hostport} is "
                                 "gone (the server or its proxy stopped, or the network broke); this "
                                 "program's job has ended. Call raylite.init('ray://...') again.")
            err.__cause__ = exc
            return err
        return exc

    def _result(self, fut: concurrent.futures.Future, timeout: float | None = None) -> Any:
        return fut.result(timeout)

    def run_sync(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        self._on_loop(lambda: fn(*args))

    def head_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return P.decode(self._result(self._call("head", [P.encode(msg, 0)]), timeout))[0]

    def head_send(self, msg: P.Message) -> None:
        self._send("head_send", [P.encode(msg, 0)])

    def node_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return P.decode(self._result(self._call("node", [P.encode(msg, 0)]), timeout))[0]

    # ------------------------------------------------------------ references
    def ref_created(self, object_id: bytes, owner_address: str, *, borrowed: bool = False) -> None:
        with self._lock:
            self._counts[object_id] = self._counts.get(object_id, 0) + 1

    def ref_deleted(self, object_id: bytes) -> None:
        """From ObjectRef.__del__ (any thread, maybe under _lock): into the outbox, behind every
        call made before it (a submission that passes this ref among them); counted on the loop.
        Always scheduled, never run in place: a __del__ can fire on the loop in the middle of a
        send, and a release is never urgent."""
        if self._closed or self.loop is None:
            return
        self._outbox.append(object_id)
        self._arm()

    def _release(self, deleted: list[bytes]) -> None:
        """Count the deletions; return the grants of ids with no ObjectRef left here."""
        release = []
        with self._lock:
            for oid in deleted:
                left = self._counts.get(oid, 0) - 1
                if left > 0:
                    self._counts[oid] = left
                    continue
                self._counts.pop(oid, None)
                self._promises.pop(oid, None)
                n = self._grants.pop(oid, 0)
                if n:
                    release.append([oid, n])
        if release and not self._closed:
            with contextlib.suppress(Exception):
                self.conn.send(P.ClientCall("release", [release]))

    def _granted_refs(self, pairs: list) -> list[ObjectRef]:
        """ObjectRefs for ids the proxy just granted (under _lock, see the module docstring)."""
        with self._lock:
            out = []
            for oid, owner in pairs:
                self._grants[oid] = self._grants.get(oid, 0) + 1
                out.append(ObjectRef(oid, owner))
            return out

    # ------------------------------------------------------------ tasks and actors
    def new_task_id(self) -> bytes:
        return bytes(TaskID.from_random())

    def export_function(self, function_id: bytes, pickled: bytes) -> None:
        if function_id not in self._exported:
            self._send("export", [function_id, pickled])
            self._exported.add(function_id)

    def pack_args(self, args: tuple, kwargs: dict, what: str) -> tuple[list, list, list]:
        """(args, kwargs) pickled whole; the proxy packs them as its driver would."""
        if not args and not kwargs:
            return _NO_ARGS, [], []
        so = ser.serialize((tuple(args), kwargs), what=f"the arguments of {what}", arguments=True)
        value, _size = wire_value(so)
        return value, [], []

    def submit_task(self, spec: TaskSpec, pinned: list, retry_exceptions: Any) -> Any:
        retry = b"" if isinstance(retry_exceptions, bool) else pickle.dumps(retry_exceptions)
        size = _args_size(spec.args)
        with self._lock:  # granted before the call leaves: a release cannot overtake it
            refs = self._granted_refs([(bytes(oid), self.address) for oid in spec.return_ids()])
            self._send("submit", [spec.to_wire(), retry], size)
        if spec.num_returns == STREAMING:  # its one return is the generator's completion
            return ObjectRefGenerator(spec.task_id, self, refs[0])
        if spec.num_returns in (1, DYNAMIC):
            return refs[0]
        return refs if spec.num_returns > 1 else None

    def submit_actor_task(self, spec: TaskSpec, pinned: list, held: tuple[bytes, ...] = ()) -> Any:
        """`held` is unused: handles here carry no token (actor_token)."""
        return self.submit_task(spec, pinned, False)  # the proxy tells them apart by spec.kind

    def register_actor(self, spec: TaskSpec, get_if_exists: bool) -> P.RegisterActorReply:
        wire = spec.to_wire()
        return P.decode(self._result(self._call("actor", [wire, get_if_exists], _args_size(spec.args))))[0]

    def actor_out_of_scope(self, actor_id: bytes) -> None:
        """A handle's last copy went; after shutdown() there is nothing to tell (the proxy ended
        the job's actors), so a handle collected then stays silent."""
        if not self._closed:
            with contextlib.suppress(RayClientError):  # closed meanwhile
                self._send("aos", [actor_id])

    def actor_token(self, actor_id: bytes, creation_task_id: bytes) -> None:
        """None: over the Ray Client a handle counts in this process only (the proxy holds the
        actor; actor_out_of_scope tells it when the last local handle went)."""
        return None

    def actor_info(self, actor_id: bytes, wait_alive: bool = False) -> P.ActorInfo:
        return self.head_request(P.GetActorInfo(actor_id, wait_alive, -1))

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self._result(self._call("kill", [actor_id, no_restart]))

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        self._result(self._call("cancel", [ref._id, ref._owner, force, recursive]))

    def flush_task_events(self) -> None:
        pass

    # ------------------------------------------------------------ objects
    def put(self, value: Any, *, _owner_address: str | None = None) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError("Calling put() on an ObjectRef is not allowed: it is already in the object "
                            "store. Pass the ref itself, or put([ref]) to wrap it in a list.")
        value, size = wire_value(ser.serialize(value, what="the value passed to put()"))
        pair = self._result(self._call("put", value, size))
        return self._granted_refs([pair])[0]

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        if any(r._id in self._promises for r in refs):
            return self._get_with_promises(refs, timeout)
        fut = self._call("get", [[[r._id, r._owner] for r in refs], timeout])
        return self._values(self._result(fut))

    def _values(self, reply: list) -> list[Any]:
        meta, buffers, granted = reply
        with self._lock:  # grants and the refs the value holds, together
            for oid in granted:
                self._grants[oid] = self._grants.get(oid, 0) + 1
            return ser.deserialize(meta, buffers)

    def _get_with_promises(self, refs: list[ObjectRef], timeout: float | None) -> list[Any]:
        remote = [r for r in refs if r._id not in self._promises]
        values = dict(zip((r._id for r in remote), self.get(remote, timeout))) if remote else {}
        return [values[r._id] if r._id in values else self._promises[r._id].result(timeout) for r in refs]

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        local = {r._id for r in refs if r._id in self._promises and self._promises[r._id].done()}
        remote = [r for r in refs if r._id not in self._promises]
        ready_ids = set(local)
        if remote and len(local) < num_returns:
            need = min(num_returns - len(local), len(remote))
            ready_ids.update(self._result(self._call("wait", [[[r._id, r._owner] for r in remote], need,
                                                              timeout, fetch_local])))
        ready = [r for r in refs if r._id in ready_ids][:num_returns]
        taken = {r._id for r in ready}
        return ready, [r for r in refs if r._id not in taken]

    def wait_with_generators(self, items: list, num_returns: int,
                             timeout: float | None) -> tuple[list, list]:
        wire = [["g", i._task_id, i._index] if isinstance(i, ObjectRefGenerator) else ["r", i._id, i._owner]
                for i in items]
        ready_idx = set(self._result(self._call("waitg", [wire, num_returns, timeout])))
        ready = [item for i, item in enumerate(items) if i in ready_idx]
        return ready, [item for i, item in enumerate(items) if i not in ready_idx]

    def future_of(self, ref: ObjectRef) -> concurrent.futures.Future:
        if ref._id in self._promises:
            return self._promises[ref._id]
        out: concurrent.futures.Future = concurrent.futures.Future()
        inner = self._call("get", [[[ref._id, ref._owner]], None])

        def done(f: concurrent.futures.Future) -> None:
            try:
                out.set_result(self._values(f.result())[0])
            except BaseException as e:  # noqa: BLE001
                out.set_exception(e)

        inner.add_done_callback(done)
        return out

    def promise(self, produce: Any) -> ObjectRef:
        """A value this program computes on its own loop (a placement group's ready()); such a
        ref works with get/wait/await here, but cannot be passed to tasks."""
        oid = bytes(ObjectID.for_put())
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._promises[oid] = fut
        ref = ObjectRef(oid, self.address)

        async def run() -> None:
            try:
                fut.set_result(await produce(lambda: oid in self._promises))
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

        self._on_loop(lambda: self.loop.create_task(run()))
        return ref

    # ------------------------------------------------------------ generators
    def next_generator_item(self, task_id: bytes, index: int, timeout: float | None) -> ObjectRef | None:
        pair = self._result(self._call("gen_next", [task_id, index, timeout]))
        return None if pair is None else self._granted_refs([pair])[0]

    def generator_length(self, task_id: bytes) -> int:
        return self._result(self._call("gen_len", [task_id]))

    def generator_dropped(self, task_id: bytes) -> None:
        if not self._closed:
            with contextlib.suppress(Exception):
                self._send("gen_drop", [task_id])

    def owned_objects(self) -> list:
        return []

    async def connection(self, address: str) -> Any:
        """A direct link to a cluster process: what a Ray Client program never has."""
        raise RayClientError(
            f"this program is connected through Ray Client (ray://{self.hostport}) and cannot reach "
            f"{address} directly; run it on a machine of the cluster (init(address='HOST:PORT')), or use "
            "`raylite list ...` / the dashboard on the head for the cluster's state.")


def _args_size(args: list) -> int:
    """Bytes of a packed (args, kwargs) [meta, buffers], for size_hint."""
    return len(args[0]) + sum(memoryview(b).nbytes for b in args[1])
