"""The actor side of a compiled graph: a thread that runs this actor's part of every execution.

The driver compiles a DAG of actor method calls into one plan per actor (built by
`raylite.dag.compiled_dag_node`): the methods this actor runs, in the DAG's topological order,
where each argument comes from (a constant, the execution's input, the result of an earlier
call here, or a channel from another actor) and where each result goes (channels to other
actors or back to the driver). `GraphRunner` then loops, one execution per turn:

    read the driver's frame (the input, or a tick; STOP ends the loop)
    for each call in order: gather its arguments, call the method, send the result on

No task is submitted and no object is stored per execution: values travel as pickled frames
over channels connected once (`raylite._core.transport.channels`). The loop runs on its own thread, so
the actor still answers ordinary calls meanwhile (as in Ray; keeping them apart is the user's
job). Errors: a method that raises sends its error instead of a value, and calls that depend
on it forward the error without running, so the driver re-raises it from `ray.get` and the
graph keeps working. A peer that dies breaks the graph: the runner tells its downstream peers
which actor is gone (status BROKEN) and stops.

Plan argument templates: ["c", value] | ["i", [[accessor, key], ...]] | ["n", nid, peer, channel]
(peer "" means the result of call `nid` on this actor).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import pickle
import threading
import traceback
from typing import Any

import cloudpickle

from raylite import exceptions as E
from raylite._core import serialization as ser
from raylite._core.transport import channels as C

DRIVER = "driver"
CONNECT_TIMEOUT_S = 60.0


def dumps(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001  lambdas, local classes, ...: cloudpickle handles them
        return cloudpickle.dumps(value, protocol=5)


def dumps_error(err: BaseException) -> bytes:
    return pickle.dumps(ser.serialize(err, kind=ser.KIND_ERROR).to_inline(), protocol=5)


def loads_error(payload: bytes) -> BaseException:
    return ser.from_inline(pickle.loads(payload))


class _Upstream(Exception):
    """An argument is an error or a broken graph from upstream: skip the call, pass it on."""

    def __init__(self, status: int, payload: bytes) -> None:
        self.status = status
        self.payload = payload


class GraphRunner:
    def __init__(self, plan: dict, listener: C.ChannelListener, actor: Any, actor_loop: Any,
                 token: str, where: tuple[int, str], on_exit: Any) -> None:
        self.plan = plan
        self.listener = listener
        self.actor = actor
        self.actor_loop = actor_loop
        self.token = token
        self.pid, self.ip = where
        self.on_exit = on_exit
        self.names: dict[str, str] = plan.get("names", {})
        self._out: dict[str, C.Endpoint] = {}
        self._thread = threading.Thread(target=self._run, name="raylite-compiled-graph", daemon=True)

    def start(self) -> None:
        """Connect to the actors this one sends to, then start the loop (errors reach the driver)."""
        for peer, address in self.plan["out_peers"].items():
            self._out[peer] = C.connect(address, self.token, self.plan["me"], CONNECT_TIMEOUT_S)
        self._thread.start()

    def _endpoint(self, peer: str) -> C.Endpoint:
        ep = self._out.get(peer)
        if ep is None:
            ep = self._out[peer] = self.listener.wait_peer(peer, CONNECT_TIMEOUT_S)
        return ep

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            driver = self._endpoint(DRIVER)
            ops = self.plan["ops"]
            while True:
                status, payload = driver.recv(self.plan["input_channel"])
                if status == C.STOP:
                    return
                data = pickle.loads(payload) if status == C.OK and payload else None
                self._execute_once(ops, data)
        except C.ChannelClosedError as e:
            self._broken(str(e))
        finally:
            self._close()

    def _execute_once(self, ops: list, data: Any) -> None:
        local: dict[int, tuple[int, Any]] = {}
        received: dict[tuple[str, int], tuple[int, bytes]] = {}
        for op in ops:
            try:
                args = [self._arg(t, data, local, received) for t in op["args"]]
                kwargs = {k: self._arg(t, data, local, received) for k, t in op["kwargs"].items()}
            except _Upstream as up:
                if up.status == C.BROKEN:
                    raise C.ChannelClosedError(up.payload.decode(errors="replace")) from None
                local[op["nid"]] = (up.status, up.payload)
                self._send(op, up.status, up.payload)
                continue
            try:
                value = self._call(op["method"], args, kwargs)
            except Exception as e:  # noqa: BLE001
                payload = dumps_error(self._task_error(op["method"], e))
                local[op["nid"]] = (C.ERROR, payload)
                self._send(op, C.ERROR, payload)
                continue
            local[op["nid"]] = (C.OK, value)
            if op["sends"]:
                self._send(op, C.OK, dumps(value))

    def _arg(self, template: list, data: Any, local: dict, received: dict) -> Any:
        kind = template[0]
        if kind == "c":
            return template[1]
        if kind == "i":
            return _input_part(data, template[1])
        nid, peer, channel = template[1], template[2], template[3]
        if not peer:
            status, value = local[nid]
            if status != C.OK:
                raise _Upstream(status, value)
            return value
        key = (peer, channel)
        if key not in received:
            received[key] = self._endpoint(peer).recv(channel)
        status, payload = received[key]
        if status == C.OK:
            return pickle.loads(payload)
        raise _Upstream(status, payload)

    def _call(self, method_name: str, args: list, kwargs: dict) -> Any:
        method = getattr(self.actor, method_name)
        if inspect.iscoroutinefunction(method) and self.actor_loop is not None:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self.actor_loop).result()
        result = method(*args, **kwargs)
        if inspect.isawaitable(result):
            return asyncio.run_coroutine_threadsafe(_await(result), self.actor_loop).result()
        return result

    def _task_error(self, method_name: str, e: BaseException) -> BaseException:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None))
        try:
            ser.serialize(e)
            cause: BaseException = e
        except Exception:  # noqa: BLE001  an unpicklable exception: keep its text
            cause = E.RaySystemError(f"{type(e).__name__}: {e}")
        name = f"{type(self.actor).__name__}.{method_name}"
        return E.RayTaskError(name, tb, cause, "", self.pid, self.ip).as_instanceof_cause()

    def _send(self, op: dict, status: int, payload: bytes) -> None:
        for peer, channel in op["sends"]:
            self._endpoint(peer).send(channel, status, payload)

    # ------------------------------------------------------------------ failure and exit
    def _broken(self, why: str) -> None:
        """A peer is gone: tell every downstream peer (best effort) so the driver learns who."""
        message = why.encode()
        for op in self.plan["ops"]:
            for peer, channel in op["sends"]:
                with contextlib.suppress(Exception):
                    ep = self._out.get(peer) or self.listener.wait_peer(peer, 0.5)
                    ep.send(channel, C.BROKEN, message)

    def _close(self) -> None:
        # forget the graph first: the driver's teardown() returns once it sees our side close,
        # and the next compile's open() on this actor must then find it free
        self.on_exit(self)
        for ep in self._out.values():
            ep.close()
        self.listener.close()


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _input_part(data: Any, steps: list) -> Any:
    """The part of one execution's input that an argument names (see raylite.dag.input_node):
    `data` is (args, kwargs); no steps is the whole input (the one argument, or all of them)."""
    args, kwargs = data
    if not steps:
        return args[0] if len(args) == 1 and not kwargs else _AllInputs(args, kwargs)
    (accessor, key), rest = steps[0], steps[1:]
    if len(args) == 1 and not kwargs:
        value = getattr(args[0], key) if accessor == "__getattr__" else args[0][key]
    else:
        value = args[key] if isinstance(key, int) else kwargs[key]
    for accessor, key in rest:
        value = getattr(value, key) if accessor == "__getattr__" else value[key]
    return value


class _AllInputs:
    """Several execute() arguments passed whole to one method (rare): indexable like Ray's."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.args, self.kwargs = args, kwargs

    def __getitem__(self, key: int | str) -> Any:
        return self.args[key] if isinstance(key, int) else self.kwargs[key]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_") or key in ("args", "kwargs"):
            raise AttributeError(key)
        return self.kwargs[key]




class GraphHost:
    """An actor's compiled-graph slot: a listener opened for one graph, then its runner.

    An actor takes part in at most one compiled graph at a time (as in Ray); the slot frees
    itself when the runner ends (teardown, or a broken graph).
    """

    def __init__(self, token: str, host_ip: str, pid: int, socket_dir: str | None = None) -> None:
        self.token = token
        self.host_ip = host_ip
        self.pid = pid
        self.socket_dir = socket_dir  # the session's private sockets directory (the listener's Unix socket)
        self._lock = threading.Lock()
        self._graph = ""
        self._listener: C.ChannelListener | None = None
        self._runner: GraphRunner | None = None

    def open(self, graph_id: str, actor_name: str) -> dict:
        with self._lock:
            if self._listener is not None:
                raise ValueError(f"Actor {actor_name} already takes part in a compiled graph; an actor "
                                 "can run one at a time. Call teardown() on that graph first.")
            self._graph = graph_id
            self._listener = C.ChannelListener(self.token, self.host_ip, socket_dir=self.socket_dir)
            return {**self._listener.address(), "name": actor_name}

    def start(self, plan: dict, actor: Any, actor_loop: Any) -> bool:
        with self._lock:
            if self._listener is None or plan["graph"] != self._graph:
                raise ValueError("this actor has no open channel listener for that compiled graph")
            runner = GraphRunner(plan, self._listener, actor, actor_loop, self.token,
                                 (self.pid, self.host_ip), self._ended)
            self._runner = runner
        try:
            runner.start()
        except BaseException:
            self.abort(plan["graph"])
            raise
        return True

    def abort(self, graph_id: str) -> bool:
        """Forget a graph whose compile failed before its runner started here."""
        with self._lock:
            if self._graph != graph_id or self._listener is None:
                return False
            listener, self._listener, self._runner, self._graph = self._listener, None, None, ""
        listener.close()
        return True

    def _ended(self, runner: GraphRunner) -> None:
        with self._lock:
            if self._runner is runner:
                self._listener, self._runner, self._graph = None, None, ""
