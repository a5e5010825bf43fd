"""Compiled graphs: `dag.experimental_compile()` runs a static DAG of actor calls over channels.

`.execute()` on a DAG submits one actor task per node, every time. A compiled graph does the
planning once: each actor gets the list of its calls and where their arguments come from, and
runs them on a background thread for every execution (`raylite._core.worker.cgraph_runner`); values
move between the driver and the actors over channels connected once
(`raylite.experimental.channel`). An execution is then one frame per actor from the driver, a
method call per node and one frame per edge: no scheduling, no object store, no ref counting.

    with InputNode() as inp:
        dag = b.echo.bind(a.echo.bind(inp))
    compiled = dag.experimental_compile()
    ray.get(compiled.execute("hi"))          # "hi"; execute() returns a CompiledDAGRef
    compiled.teardown()

What compiles (as in Ray): method calls on actors created with `.remote()`, arguments that are
the InputNode, parts of it (`inp[0]`, `inp.x`), other calls' results or constants, and a
`MultiOutputNode` of calls as the root. A call that raises passes its error to the calls that
depend on it and to `ray.get`; the graph keeps working. An actor that dies breaks the graph:
`ray.get` raises ActorDiedError and the graph tears itself down, leaving the live actors free.

The driver side is single-threaded under one lock: `execute` writes the input frames and
`ray.get` reads result frames, each also draining the other direction while it waits, so a
slow reader never deadlocks a writer. Results wait in the driver until read.
"""

from __future__ import annotations

import atexit
import pickle
import selectors
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raylite import api
from raylite import exceptions as E
from raylite.dag.context import DAGContext
from raylite.dag.dag_node import DAGNode, _walk
from raylite.dag.input_node import InputAttributeNode, InputNode
from raylite.experimental import channel as ch
from raylite.experimental.compiled_dag_ref import CompiledDAGFuture, CompiledDAGRef

if TYPE_CHECKING:  # handles are used here, never made: actor.py is above (its bind() makes nodes)
    from raylite.actor import ActorHandle

INPUT_CHANNEL = 0
# how long a broken graph waits for its live actors to take the stop and close their side
BREAK_GRACE_S = 2.0


@dataclass
class _Call:
    """One ClassMethodNode of the DAG, numbered in topological order."""

    nid: int
    node: DAGNode
    actor: ActorHandle
    method: str

    @property
    def actor_key(self) -> str:
        return self.actor._actor_id.hex()


def compile_dag(outputs: list[DAGNode], single_output: bool,
                enable_asyncio: bool = False, _submit_timeout: float | None = None,
                _max_inflight_executions: int | None = None,
                _max_buffered_results: int | None = None, **_ignored: Any) -> CompiledDAG:
    """Plan the DAG that ends in `outputs`, set it up on its actors, and return it compiled."""
    ctx = DAGContext.get_current()
    return CompiledDAG(outputs, single_output, enable_asyncio,
                       ctx.submit_timeout if _submit_timeout is None else _submit_timeout,
                       _max_inflight_executions or ctx.max_inflight_executions,
                       _max_buffered_results or ctx.max_buffered_results, ctx.teardown_timeout)


class CompiledDAG:
    """A DAG set up on its actors: `execute` / `execute_async`, `teardown`, `visualize`."""

    def __init__(self, outputs: list[DAGNode], single_output: bool, enable_asyncio: bool,
                 submit_timeout: float, max_inflight: int, max_buffered: int,
                 teardown_timeout: float) -> None:
        self._single_output = single_output
        self._enable_asyncio = enable_asyncio
        self._submit_timeout = submit_timeout
        self._max_inflight = max_inflight
        self._max_buffered = max_buffered
        self._teardown_timeout = teardown_timeout
        self._lock = threading.RLock()
        self._id = uuid.uuid4().hex
        self._calls = _topological_calls(outputs)
        self._actors: dict[str, ActorHandle] = {}
        for call in self._calls:
            self._actors.setdefault(call.actor_key, call.actor)
        self._endpoints: dict[str, ch.Endpoint] = {}
        self._needs_input: dict[str, bool] = {}
        self._out_channels: list[tuple[str, int]] = []  # output position -> (actor, channel)
        self._frames_seen: dict[tuple[str, int], int] = {}
        self._positions: dict[tuple[str, int], list[int]] = {}
        self._results: dict[int, list[Any]] = {}
        self._released: list[tuple[int, int | None]] = []
        self._next_index = 0
        self._broken: BaseException | None = None
        self._torn_down = False
        self._selector = selectors.DefaultSelector()
        self._setup(outputs)
        _live.add(self)

    # ================================================================ setup
    def _setup(self, outputs: list[DAGNode]) -> None:
        handles = list(self._actors.values())
        opened: list[ActorHandle] = []
        try:
            refs = [h.__raylite_cgraph_open__.remote(self._id) for h in handles]
            addresses = {}
            for h, ref in zip(handles, refs):
                addresses[h._actor_id.hex()] = api.get(ref, timeout=60)
                opened.append(h)
            plans = self._plans(outputs, addresses)
            starts = [h.__raylite_cgraph_start__.remote(plans[key]) for key, h in self._actors.items()]
            for key in self._actors:
                self._endpoints[key] = ch.connect(addresses[key])
            api.get(starts, timeout=90)
        except BaseException:
            for ep in self._endpoints.values():
                ep.close()
            for h in opened:
                try:
                    h.__raylite_cgraph_abort__.remote(self._id)
                except Exception:  # noqa: BLE001
                    pass
            raise
        for key, ep in self._endpoints.items():
            ep.sock.setblocking(False)
            self._selector.register(ep.sock, selectors.EVENT_READ, key)

    def _plans(self, outputs: list[DAGNode], addresses: dict[str, dict]) -> dict[str, dict]:
        by_node = {id(c.node): c for c in self._calls}
        next_channel = [INPUT_CHANNEL + 1]

        def new_channel() -> int:
            next_channel[0] += 1
            return next_channel[0] - 1

        edge_channel: dict[tuple[int, str], int] = {}  # (producer nid, consumer actor) -> channel
        sends: dict[int, list[list]] = {c.nid: [] for c in self._calls}
        ops: dict[str, list[dict]] = {key: [] for key in self._actors}
        out_peers: dict[str, set[str]] = {key: set() for key in self._actors}
        self._needs_input = dict.fromkeys(self._actors, False)

        def template(value: Any, consumer: _Call) -> list:
            if isinstance(value, DAGNode):
                producer = by_node.get(id(value))
                if producer is None:
                    steps = _input_steps(value)
                    self._needs_input[consumer.actor_key] = True
                    return ["i", steps]
                if producer.actor_key == consumer.actor_key:
                    return ["n", producer.nid, "", 0]
                key = (producer.nid, consumer.actor_key)
                if key not in edge_channel:
                    edge_channel[key] = new_channel()
                    sends[producer.nid].append([consumer.actor_key, edge_channel[key]])
                    out_peers[producer.actor_key].add(consumer.actor_key)
                return ["n", producer.nid, producer.actor_key, edge_channel[key]]
            nested: list[DAGNode] = []
            _walk(value, nested.append)
            if nested:
                raise TypeError(f"A compiled graph takes DAG nodes only as direct arguments of a call, "
                                f"not inside {type(value).__name__}s: {consumer.method} got {value!r:.80}.")
            return ["c", value]

        for call in self._calls:
            op = {"nid": call.nid, "method": call.method,
                  "args": [template(a, call) for a in call.node.get_args()],
                  "kwargs": {k: template(v, call) for k, v in call.node.get_kwargs().items()},
                  "sends": sends[call.nid]}
            ops[call.actor_key].append(op)
        output_channel: dict[int, int] = {}
        for position, node in enumerate(outputs):
            call = by_node[id(node)]
            if call.nid not in output_channel:
                output_channel[call.nid] = new_channel()
                sends[call.nid].append([ch.DRIVER, output_channel[call.nid]])
            key = (call.actor_key, output_channel[call.nid])
            self._out_channels.append(key)
            self._positions.setdefault(key, []).append(position)
            self._frames_seen[key] = 0
        names = {key: addresses[key].get("name", key[:8]) for key in self._actors}
        return {key: {"graph": self._id, "me": key, "ops": ops[key], "input_channel": INPUT_CHANNEL,
                      "out_peers": {p: addresses[p] for p in sorted(out_peers[key])}, "names": names}
                for key in self._actors}

    # ================================================================ executing
    def execute(self, *args: Any, **kwargs: Any) -> CompiledDAGRef | list[CompiledDAGRef]:
        """Run the graph once on these inputs; returns a CompiledDAGRef (a list of them for a
        MultiOutputNode) to `ray.get`."""
        try:
            index = self._submit(args, kwargs)
        except E.ActorDiedError as err:
            if err is not self._broken:
                raise
            # Ray's documented behaviour: execute() still returns; get() of its result raises
            index = self._failed_execution(err)
        if self._single_output:
            return CompiledDAGRef(self, index, 0)
        return [CompiledDAGRef(self, index, i) for i in range(len(self._out_channels))]

    async def execute_async(self, *args: Any, **kwargs: Any) -> Any:
        """`execute` for asyncio code: returns a CompiledDAGFuture (a list of them for a
        MultiOutputNode); `await` it for the value."""
        refs = self.execute(*args, **kwargs)
        if isinstance(refs, list):
            return [CompiledDAGFuture(r) for r in refs]
        return CompiledDAGFuture(refs)

    def _submit(self, args: tuple, kwargs: dict) -> int:
        with self._lock:
            self._check_usable()
            deadline = _deadline(self._submit_timeout)
            while self._next_index - self._completed() >= self._max_inflight:
                if not self._pump(deadline):
                    raise E.RayChannelTimeoutError(
                        f"The compiled graph has {self._max_inflight} executions in flight and none "
                        f"finished within {self._submit_timeout}s (_max_inflight_executions).")
            if sum(1 for slots in self._results.values() for s in slots if s is not None) >= self._max_buffered:
                raise E.RayCgraphCapacityExceeded(
                    f"The compiled graph holds {self._max_buffered} results nobody read: ray.get() the "
                    "CompiledDAGRefs of earlier executions (or drop them) before executing more.")
            payload = ch.dumps((args, kwargs))
            for key, ep in self._endpoints.items():
                if self._needs_input[key]:
                    ep.queue(INPUT_CHANNEL, ch.OK, payload)
                else:
                    ep.queue(INPUT_CHANNEL, ch.TICK)
            index = self._next_index
            self._next_index += 1
            self._results[index] = [None] * len(self._out_channels)
            self._flush(deadline)
            return index

    def _failed_execution(self, error: BaseException) -> int:
        """An execution that could not start (the graph broke): its results raise `error`.
        Negative indices, so in-flight counting never sees it."""
        with self._lock:
            self._failed_count = getattr(self, "_failed_count", 0) + 1
            index = -self._failed_count
            self._results[index] = [(_BROKEN_RESULT, error) for _ in self._out_channels]
            return index

    def _get(self, index: int, position: int | None, timeout: float | None) -> Any:
        deadline = _deadline(timeout)
        with self._lock:
            while True:
                slots = self._results.get(index)
                if slots is not None and slots[position] is not None:
                    status, payload = slots[position]
                    slots[position] = _TAKEN
                    if all(s is _TAKEN for s in slots):
                        del self._results[index]
                    if status is _BROKEN_RESULT:
                        raise payload
                    return _decode(status, payload)
                if self._broken is not None:
                    raise self._broken
                if self._torn_down:
                    raise E.RayChannelError("The compiled graph was torn down before this result arrived.")
                if not self._pump(deadline):
                    raise E.GetTimeoutError(f"The compiled graph's execution {index} did not finish "
                                            f"within {timeout}s.")

    def _release(self, index: int, position: int | None) -> None:
        self._released.append((index, position))  # applied under the lock by the next pump

    # ================================================================ the driver's I/O
    def _completed(self) -> int:
        return min(self._frames_seen.values()) if self._frames_seen else self._next_index

    def _flush(self, deadline: float | None) -> None:
        while any(ep.has_pending() for ep in self._endpoints.values()):
            if not self._pump(deadline):
                self._break(E.RayChannelTimeoutError(
                    f"The compiled graph's actors did not take an execution's input within "
                    f"{self._submit_timeout}s."))
                raise self._broken  # type: ignore[misc]

    def _pump(self, deadline: float | None) -> bool:
        """Move bytes once: write pending input, read result frames. False: timed out.

        Raises what broke the graph: a break (an actor died) closes the selector and the
        channels, possibly with bytes still queued, so a caller looping on pending output stops."""
        if self._broken is not None:
            raise self._broken
        if self._torn_down:
            raise E.RayChannelError("This compiled graph was torn down; compile the DAG again.")
        for key, ep in self._endpoints.items():
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if ep.has_pending() else 0)
            self._selector.modify(ep.sock, events, key)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = self._selector.select(timeout)
        if not ready:
            return False
        for selkey, events in ready:
            actor = selkey.data
            ep = self._endpoints[actor]
            try:
                if events & selectors.EVENT_WRITE:
                    ep.flush_some()
                if events & selectors.EVENT_READ:
                    while (frame := ep.next_frame(block=False)) is not None:
                        self._on_frame(actor, *frame)
            except ch.ChannelClosedError:
                self._break(self._died(actor))
        self._apply_releases()
        return True

    def _on_frame(self, actor: str, channel: int, status: int, payload: bytes) -> None:
        if status == ch.BROKEN:
            self._break(E.ActorDiedError(f"The compiled graph broke: {payload.decode(errors='replace')}. "
                                         "It is torn down; its live actors can be used again."))
            return
        key = (actor, channel)
        index = self._frames_seen.get(key)
        if index is None:
            return
        self._frames_seen[key] = index + 1
        slots = self._results.get(index)
        if slots is None:
            return
        for position in self._positions[key]:
            if slots[position] is None:
                slots[position] = (status, payload)

    def _apply_releases(self) -> None:
        while self._released:
            index, position = self._released.pop()
            slots = self._results.get(index)
            if slots is None:
                continue
            for p in range(len(slots)) if position is None else [position]:
                slots[p] = _TAKEN
            if all(s is _TAKEN for s in slots):
                del self._results[index]

    def _died(self, actor: str) -> BaseException:
        handle = self._actors.get(actor)
        name = f"{handle._class_name}({actor[:8]})" if handle is not None else actor[:8]
        return E.ActorDiedError(f"Actor {name} of the compiled graph died (or closed its channel). The "
                                "graph is torn down; its live actors can be used again.", actor)

    def _break(self, error: BaseException) -> None:
        if self._broken is None:
            self._broken = error
            self._shutdown(wait=False)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._torn_down:
            raise E.RayChannelError("This compiled graph was torn down; compile the DAG again.")

    # ================================================================ teardown
    def teardown(self) -> None:
        """Stop the graph on its actors (each finishes the executions it was given first) and
        close its channels. The actors stay alive and can join another compiled graph."""
        with self._lock:
            self._shutdown(wait=True)

    def _shutdown(self, wait: bool) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        _live.discard(self)
        for ep in self._endpoints.values():
            ep.queue(INPUT_CHANNEL, ch.STOP)
        deadline = time.monotonic() + (self._teardown_timeout if wait else BREAK_GRACE_S)
        open_eps = dict(self._endpoints)
        while open_eps and time.monotonic() < deadline:  # until each actor closes its side
            for key, ep in list(open_eps.items()):
                try:
                    if ep.has_pending():
                        ep.flush_some()
                    while (frame := ep.next_frame(block=False)) is not None:
                        if self._broken is None:  # results of executions given before the stop
                            self._on_frame(key, *frame)
                except ch.ChannelClosedError:
                    del open_eps[key]
            if open_eps:
                time.sleep(0.001)
        self._selector.close()
        for ep in self._endpoints.values():
            ep.close()

    def __del__(self) -> None:
        if not getattr(self, "_torn_down", True):
            try:
                self._shutdown(wait=False)
            except Exception:  # noqa: BLE001
                pass

    def visualize(self, filename: str = "compiled_graph", format: str = "png", view: bool = False,
                  return_dot: bool = False) -> Any:
        """Draw the graph with graphviz (calls grouped by actor); needs `pip install graphviz`."""
        try:
            import graphviz
        except ImportError:
            raise ImportError("CompiledDAG.visualize() needs the graphviz package: pip install graphviz "
                              "(and the Graphviz binaries to render).") from None
        dot = graphviz.Digraph(comment="compiled graph")
        dot.node("input", "input")
        for call in self._calls:
            dot.node(str(call.nid), f"{call.actor._class_name}.{call.method}")
            for arg in list(call.node.get_args()) + list(call.node.get_kwargs().values()):
                src = next((c for c in self._calls if c.node is arg), None)
                if src is not None:
                    dot.edge(str(src.nid), str(call.nid))
                elif isinstance(arg, (InputNode, InputAttributeNode)):
                    dot.edge("input", str(call.nid))
        if return_dot:
            return dot.source
        dot.render(filename, format=format, view=view)
        return dot.source

    def __repr__(self) -> str:
        return f"CompiledDAG({len(self._calls)} calls on {len(self._actors)} actors)"


_TAKEN = object()  # a result slot whose value was read or dropped
_BROKEN_RESULT = object()  # status of a result slot of an execution that never started: raise its error
_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _teardown_all() -> None:
    for dag in list(_live):
        try:
            dag._shutdown(wait=False)
        except Exception:  # noqa: BLE001
            pass


def _deadline(timeout: float | None) -> float | None:
    if timeout is None or timeout < 0:
        return None
    return time.monotonic() + timeout


def _decode(status: int, payload: bytes) -> Any:
    if status == ch.OK:
        return pickle.loads(payload)
    raise ch.loads_error(payload)


def _input_steps(node: DAGNode) -> list[list]:
    """[[accessor, key], ...] from the InputNode down to this part of the input."""
    steps: list[list] = []
    while isinstance(node, InputAttributeNode):
        steps.append([node._accessor_method, node.key])
        node = node.get_other_args_to_resolve()["dag_input_node"]
    if not isinstance(node, InputNode):
        raise TypeError(f"A compiled graph cannot take {type(node).__name__} {node!r:.80} as an argument: "
                        "it compiles actor method calls, the InputNode and constants only.")
    steps.reverse()
    return steps


def _topological_calls(outputs: list[DAGNode]) -> list[_Call]:
    """Every actor method call the outputs need, children first; checks what can compile."""
    order: list[_Call] = []
    seen: dict[int, bool] = {}
    inputs: list[DAGNode] = []
    stack: list[tuple[DAGNode, bool]] = [(n, False) for n in reversed(outputs)]
    while stack:
        node, done = stack.pop()
        if done:
            call = node._compiled_call()  # type: ignore[attr-defined]
            handle, method = call
            order.append(_Call(len(order), node, handle, method))
            seen[id(node)] = True
            continue
        if id(node) in seen:
            continue
        if isinstance(node, (InputNode, InputAttributeNode)):
            seen[id(node)] = True
            inputs.append(node)
            continue
        call = getattr(node, "_compiled_call", lambda: None)()
        if call is None:
            raise TypeError(f"A compiled graph runs actor method calls only, but the DAG has "
                            f"{type(node).__name__} {node!r:.80}. Call .execute() on it instead, "
                            "or bind methods of actors made with .remote().")
        if isinstance(call[0], DAGNode):  # a ClassNode, not a handle of a live actor
            raise TypeError(f"{call[1]} is bound to an actor the DAG would create ({type(call[0]).__name__}); "
                            "a compiled graph needs actors created with .remote() before compiling.")
        seen[id(node)] = False
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(node._child_nodes()) if id(c) not in seen)
    roots = {id(_root_input(n)) for n in inputs}
    if len(roots) > 1:
        raise ValueError("A compiled graph has at most one InputNode: build it inside one "
                         "`with InputNode() as inp:` block.")
    return order


def _root_input(node: DAGNode) -> DAGNode:
    while isinstance(node, InputAttributeNode):
        node = node.get_other_args_to_resolve()["dag_input_node"]
    return node
