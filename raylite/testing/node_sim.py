"""Many simulated nodes in one process, speaking the real protocol to a real head.

A real node daemon costs about 40 MiB and three processes, so a 2-core machine holds a few
dozen of them; what the head does at thousands of nodes (heartbeat fan-in, scheduling,
`raylite status`, a wave of dead nodes) is measured with these instead. A simulated node:

- registers with the head and heartbeats like a node daemon (resource report every
  `heartbeat_interval_s`, machine statistics every `stats_interval_s`);
- grants worker leases from its resources (queueing what does not fit) and "runs" the tasks
  pushed to its leased workers by answering them, at once or after `task_s`, with `None`
  (or, with `return_bytes`, with an object it holds and serves to `PullObject`);
- starts the actors the head places on it and answers their method calls the same way;
- reserves and releases placement-group bundles;
- dies on request: `crash` drops its connections (the head sees the link close at once),
  `silence` stops its heartbeats and every answer while its connections stay open (a cut
  network link: the head must notice from missing heartbeats).

It starts no processes: every node, lease and "worker" is a few Python objects and one TCP
listener (the node's and its workers' address, on `ip`).

Library use (`NodeSimulator` on a running event loop) or a command line that reads commands
from stdin and answers on stdout, for benchmarks that drive it from another process::

    python -m raylite.testing.node_sim --address tcp://127.0.0.1:6379 --token T --nodes 1000
    # prints "READY {...}"; then, one per line: "silence 100", "crash 10", "stats", "quit"
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core import serialization as ser
from raylite._core.config import env_token
from raylite._core.ids import NodeID, ObjectID, WorkerID
from raylite._core.task_spec import _FIELDS as SPEC_FIELDS
from raylite._core.transport import rpc

_NONE_INLINE = ser.serialize(None).to_inline()
_SPEC_TASK_ID = SPEC_FIELDS.index("task_id")  # positions in TaskSpec.to_wire()
_SPEC_NUM_RETURNS = SPEC_FIELDS.index("num_returns")


@dataclass
class SimConfig:
    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    heartbeat_interval_s: float = 0.5
    node_dead_timeout_s: float = 5.0  # the head's; a node asks for an answer every quarter of it
    stats_interval_s: float = 2.0
    task_s: float = 0.0  # how long a pushed task "runs"
    return_bytes: int = 0  # > 0: tasks return an object of this size held by the node
    ip: str = "127.0.0.1"
    labels: dict[str, str] = field(default_factory=dict)
    record_tasks: bool = False  # keep task id -> node index of every task run (tests)


class SimNode:
    """One simulated node: its resources, leases, actors, bundles and objects."""

    def __init__(self, sim: NodeSimulator, index: int) -> None:
        self.sim = sim
        self.index = index
        self.node_id = NodeID.from_random()
        cfg = sim.config
        self.total = R.to_fixed({**cfg.resources, f"node:{cfg.ip}": 1})
        self.available = dict(self.total)
        self.address = ""
        self.state = "starting"  # starting | alive | silent | dead
        self.head: rpc.Connection | None = None
        self.server: asyncio.AbstractServer | None = None
        self.conns: set[rpc.Connection] = set()
        self.pending: collections.deque = collections.deque()  # (conn, RequestLease, rid)
        self.leases: dict[bytes, dict] = {}  # lease id -> resources held
        self.actors: dict[bytes, dict] = {}  # actor id -> resources held
        self.objects: dict[bytes, bytes] = {}
        self.tasks_run = 0
        self.next_stats = 0.0
        self.asked = 0.0  # when its last heartbeat request (one the head answers) went out
        self.sent: tuple | None = None  # the last load report sent
        self.lease_events = 0  # leases granted and returned: a report goes out after any

    # ------------------------------------------------------------ leases
    def grant(self) -> None:
        while self.pending:
            conn, msg, rid = self.pending[0]
            if conn.is_closed():
                self.pending.popleft()
                continue
            if not R.fits(msg.resources, self.available):
                return
            self.pending.popleft()
            self.lease_events += 1
            R.subtract(self.available, msg.resources)
            self.leases[msg.lease_id] = dict(msg.resources)
            with contextlib.suppress(Exception):
                conn.send(P.RequestLeaseReply(msg.lease_id, WorkerID.from_random(), self.address, self.node_id),
                          -rid)

    def release(self, lease_id: bytes) -> None:
        held = self.leases.pop(lease_id, None)
        self.lease_events += 1
        if held is not None:
            R.add(self.available, held)
            self.grant()

    def heartbeat(self, now: float) -> P.Heartbeat:
        stats = None
        if now >= self.next_stats:
            self.next_stats = now + self.sim.config.stats_interval_s
            stored = sum(len(b) for b in self.objects.values())
            stats = {"time": time.time(), "cpu_percent": 0.0, "num_cpus": 1, "mem_total_bytes": 8 << 30,
                     "mem_used_bytes": 1 << 30, "store_used_bytes": stored, "store_spilled_bytes": 0,
                     "store_capacity_bytes": 2 << 30, "workers": []}
        return P.Heartbeat(self.node_id, self.available, [m.resources for _c, m, _r in self.pending],
                           self.total, stats)


class NodeSimulator:
    """`num_nodes` simulated nodes joined to the head at `head_address`."""

    def __init__(self, head_address: str, token: str, num_nodes: int, config: SimConfig | None = None) -> None:
        self.head_address = head_address
        self.token = token
        self.num_nodes = num_nodes
        self.config = config or SimConfig()
        self.nodes: list[SimNode] = []
        self._beats: collections.deque[tuple[float, SimNode]] = collections.deque()
        self._loop_task: asyncio.Task | None = None
        self.heartbeats_sent = 0
        self.task_nodes: dict[bytes, int] = {}  # task id -> node index (config.record_tasks)
        self.handlers = {
            P.RequestLease: self._on_request_lease,
            P.ReturnLease: self._on_return_lease,
            P.CancelLease: self._on_cancel_lease,
            P.PushTask: self._on_push_task,
            P.StartActor: self._on_start_actor,
            P.KillWorker: self._on_kill_worker,
            P.ReserveBundles: self._on_reserve_bundles,
            P.ReleaseBundles: self._on_release_bundles,
            P.HeartbeatReply: self._on_heartbeat_reply,
            P.PullObject: self._on_pull_object,
            P.FreeObjects: self._on_free_objects,
            P.GetWorkerExit: lambda conn, msg, rid: self._answer(conn, P.WorkerExitReply()),
            P.GetNodeInfo: self._on_get_node_info,
            P.ObjectSealed: lambda conn, msg, rid: None,
            P.RegisterClient: self._on_register_client,
        }

    # ------------------------------------------------------------ life cycle
    async def start(self, concurrency: int = 64) -> None:
        """Start every node's listener and register it; returns once all are registered."""
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await self._start_node(SimNode(self, i))

        await asyncio.gather(*(one(i) for i in range(self.num_nodes)))
        self._loop_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def add_nodes(self, count: int) -> list[SimNode]:
        start = len(self.nodes)
        new = [SimNode(self, start + i) for i in range(count)]
        await asyncio.gather(*(self._start_node(n) for n in new))
        return new

    async def _start_node(self, node: SimNode) -> None:
        def on_connect(conn: rpc.Connection) -> None:
            conn.context["sim_node"] = node
            node.conns.add(conn)
            conn.on_close.append(node.conns.discard)

        node.server = await rpc.listen(f"tcp://{self.config.ip}:0", self.handlers, token=self.token,
                                       on_connect=on_connect)
        port = node.server.sockets[0].getsockname()[1]
        node.address = f"tcp://{self.config.ip}:{port}"
        head = await rpc.connect(self.head_address, self.handlers, token=self.token, role="node")
        head.context["sim_node"] = node
        reply = await head.request(P.RegisterNode(node.node_id, node.address, self.config.ip, node.total,
                                                  self.config.labels, f"/nonexistent/sim/{node.index}"))
        if not reply.ok:
            head.close()
            node.server.close()
            raise RuntimeError(f"the head refused simulated node {node.index}: {reply.error}")
        node.head = head
        node.state = "alive"
        head.on_close.append(lambda c: self._head_link_lost(node))
        self.nodes.append(node)
        self._beats.append((time.monotonic() + self.config.heartbeat_interval_s, node))

    def _head_link_lost(self, node: SimNode) -> None:
        if node.state in ("alive", "silent"):  # the head dropped us (declared dead, or it stopped)
            self._die(node)

    def crash(self, nodes: list[SimNode]) -> None:
        """Die at once: every connection closes (like the node's processes being killed)."""
        for n in nodes:
            self._die(n)

    def silence(self, nodes: list[SimNode]) -> None:
        """A cut link: no heartbeats and no answers; connections stay open until the head drops them."""
        for n in nodes:
            if n.state == "alive":
                n.state = "silent"

    def _die(self, node: SimNode) -> None:
        node.state = "dead"
        if node.server is not None:
            node.server.close()
        for c in [node.head, *node.conns]:
            if c is not None:
                with contextlib.suppress(Exception):
                    c.abort()

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
        for n in self.nodes:
            if n.state != "dead":
                self._die(n)
        await asyncio.sleep(0)

    def alive(self) -> list[SimNode]:
        return [n for n in self.nodes if n.state == "alive"]

    def stats(self) -> dict[str, Any]:
        return {"nodes": len(self.nodes), "alive": len(self.alive()), "heartbeats_sent": self.heartbeats_sent,
                "tasks_run": sum(n.tasks_run for n in self.nodes),
                "nodes_with_tasks": sum(1 for n in self.nodes if n.tasks_run),
                "leases": sum(len(n.leases) for n in self.nodes),
                "actors": sum(len(n.actors) for n in self.nodes)}

    async def _heartbeat_loop(self) -> None:
        """One loop for every node: a deque ordered by due time, so a tick costs only the
        heartbeats due in it (nodes registered at different times stay staggered). Like a
        node daemon, a node reports when its load changed or statistics are due, and makes
        one report a request (answered by the head) at least every `ack_every`."""
        interval = self.config.heartbeat_interval_s
        ack_every = max(interval, self.config.node_dead_timeout_s / 4)
        beats = self._beats
        while True:
            now = time.monotonic()
            while beats and beats[0][0] <= now:
                _due, node = beats.popleft()
                if node.state == "dead":
                    continue
                if node.state == "alive":
                    msg = node.heartbeat(now)
                    report = (msg.available, msg.pending, msg.total, node.lease_events)
                    ask = now - node.asked >= ack_every
                    if ask or msg.stats is not None or report != node.sent:
                        node.sent = (dict(msg.available), msg.pending, dict(msg.total), node.lease_events)
                        with contextlib.suppress(Exception):
                            if ask:
                                node.asked = now
                                node.head.request_future(msg).add_done_callback(_retrieve)
                            else:
                                node.head.send(msg)
                            self.heartbeats_sent += 1
                beats.append((now + interval, node))
            await asyncio.sleep(min(0.05, interval / 4))

    # ------------------------------------------------------------ handlers
    @staticmethod
    def _node(conn: rpc.Connection) -> SimNode | None:
        node = conn.context.get("sim_node")
        return node if node is not None and node.state == "alive" else None

    def _answer(self, conn: rpc.Connection, reply: P.Message) -> P.Message | None:
        return reply if self._node(conn) is not None else None

    def _on_register_client(self, conn, msg: P.RegisterClient, rid):
        node = self._node(conn)
        if node is None:
            return None
        return P.RegisterClientReply(node.node_id, self.config.ip, "", "", self.head_address, msg.job_id,
                                     self.token, 100 * 1024, node.address)

    def _on_request_lease(self, conn, msg: P.RequestLease, rid):
        node = self._node(conn)
        if node is None:
            return None
        if not R.fits(msg.resources, node.total):
            return P.RequestLeaseReply(msg.lease_id, error_type="TaskUnschedulableError",
                                       error=f"{msg.description}: simulated node cannot fit it")
        node.pending.append((conn, msg, rid))
        node.grant()
        return None

    def _on_return_lease(self, conn, msg: P.ReturnLease, rid):
        node = self._node(conn)
        if node is not None:
            node.release(msg.lease_id)

    def _on_cancel_lease(self, conn, msg: P.CancelLease, rid):
        node = self._node(conn)
        if node is None:
            return
        for item in list(node.pending):
            if item[1].lease_id == msg.lease_id:
                node.pending.remove(item)
                with contextlib.suppress(Exception):
                    item[0].send(P.RequestLeaseReply(msg.lease_id, error_type="Cancelled", error="cancelled"),
                                 -item[2])

    def _on_push_task(self, conn, msg: P.PushTask, rid):
        node = self._node(conn)
        if node is None:
            return None
        spec = msg.spec
        task_id = spec[_SPEC_TASK_ID]
        n = spec[_SPEC_NUM_RETURNS]
        returns = []
        for i in range(max(n, 0) if n >= 0 else 1):
            oid = ObjectID.for_return(task_id, i + 1)
            if self.config.return_bytes:
                node.objects[oid] = b"\0" * self.config.return_bytes
                returns.append([oid, "s", [node.node_id, node.address, self.config.return_bytes]])
            else:
                returns.append([oid, "v", _NONE_INLINE])
        reply = P.PushTaskReply(task_id, returns, [])
        node.tasks_run += 1
        if self.config.record_tasks:
            self.task_nodes[task_id] = node.index
        if self.config.task_s <= 0:
            return reply
        asyncio.get_running_loop().call_later(self.config.task_s, self._late_reply, node, conn, reply, rid)
        return None

    @staticmethod
    def _late_reply(node: SimNode, conn: rpc.Connection, reply: P.Message, rid: int) -> None:
        if node.state == "alive" and not conn.is_closed():
            with contextlib.suppress(Exception):
                conn.send(reply, -rid)

    async def _on_start_actor(self, conn, msg: P.StartActor, rid):
        node = self._node(conn)
        if node is None:
            return await asyncio.Event().wait()  # silent: never answer
        if not R.fits(msg.resources, node.available):
            return P.StartActorReply(False, system_error="simulated node has no room")
        R.subtract(node.available, msg.resources)
        node.actors[msg.actor_id] = dict(msg.resources)
        return P.StartActorReply(True, node.address, WorkerID.from_random(), 0)

    def _on_kill_worker(self, conn, msg: P.KillWorker, rid):
        return self._answer(conn, P.Ack()) if rid else None

    def _on_reserve_bundles(self, conn, msg: P.ReserveBundles, rid):
        node = self._node(conn)
        if node is None:
            return None
        need: dict = {}
        for _i, b in msg.bundles:
            R.add(need, b)
        if not R.fits(need, node.available):
            return P.ReserveBundlesReply(False)
        hexid = msg.pg_id.hex()
        for i, b in msg.bundles:
            R.subtract(node.available, b)
            for k, v in {**b, "bundle": 1000 * 10000}.items():
                for name in (S.bundle_resource_names(hexid, i, k), S.bundle_resource_names(hexid, None, k)):
                    node.total[name] = node.total.get(name, 0) + v
                    node.available[name] = node.available.get(name, 0) + v
        return P.ReserveBundlesReply(True)

    def _on_release_bundles(self, conn, msg: P.ReleaseBundles, rid):
        node = self._node(conn)
        if node is None:
            return
        hexid = msg.pg_id.hex()
        for name in [k for k in node.total if k.endswith(hexid)]:
            amount = node.total.pop(name)
            node.available.pop(name, None)
            base = name.split("_group_")[0]
            if f"_group_{msg.indexes[0] if msg.indexes else 0}_" in name and base != "bundle":
                R.add(node.available, {base: amount})

    def _on_heartbeat_reply(self, conn, msg: P.HeartbeatReply, rid):
        node = conn.context.get("sim_node")
        if node is not None and not msg.alive and node.state == "alive":
            self._die(node)

    def _on_pull_object(self, conn, msg: P.PullObject, rid):
        node = self._node(conn)
        if node is None:
            return None
        data = node.objects.get(msg.object_id)
        if data is None:
            return P.PullObjectReply(msg.object_id, 0, b"", False)
        return P.PullObjectReply(msg.object_id, len(data), data[msg.offset:msg.offset + msg.length], True)

    def _on_free_objects(self, conn, msg: P.FreeObjects, rid):
        node = self._node(conn)
        if node is not None:
            for oid in msg.object_ids:
                node.objects.pop(oid, None)

    def _on_get_node_info(self, conn, msg, rid):
        node = self._node(conn)
        if node is None:
            return None
        return P.GetNodeInfoReply(node.node_id, node.total, node.available, 0, 2 << 30, len(node.leases), [])


class SimulatorThread:
    """A NodeSimulator on an event loop of its own thread, for synchronous tests and benchmarks.

        with SimulatorThread("tcp://127.0.0.1:6379", token, 100) as sim:
            sim.call(lambda s: s.silence(s.alive()[:10]))
    """

    def __init__(self, head_address: str, token: str, num_nodes: int, config: SimConfig | None = None) -> None:
        self.sim = NodeSimulator(head_address, token, num_nodes, config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="node-sim", daemon=True)

    def __enter__(self) -> SimulatorThread:
        self._thread.start()
        try:
            self.run(self.sim.start())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def run(self, coro: Any, timeout_s: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def call(self, fn: Any, timeout_s: float = 30.0) -> Any:
        """fn(simulator) on the simulator's loop; returns its result."""
        async def go() -> Any:
            return fn(self.sim)

        return self.run(go(), timeout_s)

    def __exit__(self, *exc: Any) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(self.sim.close(), 10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop.close()


def _retrieve(fut: asyncio.Future) -> None:
    """A heartbeat answer nobody waits for: read its error (a closed link), so it is not logged."""
    if not fut.cancelled():
        fut.exception()


# ---------------------------------------------------------------- command line
def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m raylite.testing.node_sim",
                                description="Simulated raylite nodes joined to a real head.")
    p.add_argument("--address", required=True, help="the head: tcp://HOST:PORT")
    p.add_argument("--token", default=env_token())
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--cpus", type=float, default=1.0, help="CPUs of each simulated node")
    p.add_argument("--resources", default="{}", help="JSON: extra resources of each node")
    p.add_argument("--heartbeat-interval-s", type=float, default=0.5)
    p.add_argument("--task-s", type=float, default=0.0)
    p.add_argument("--ip", default="127.0.0.1")
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> None:
    cfg = SimConfig(resources={"CPU": args.cpus, **json.loads(args.resources)},
                    heartbeat_interval_s=args.heartbeat_interval_s, task_s=args.task_s, ip=args.ip)
    sim = NodeSimulator(args.address, args.token, args.nodes, cfg)
    t0 = time.monotonic()
    await sim.start()
    print("READY " + json.dumps({"nodes": len(sim.nodes), "start_s": time.monotonic() - t0,
                                 "node_ids": [n.node_id.hex() for n in sim.nodes]}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "quit":
            break
        cmd, _, arg = line.partition(" ")
        if cmd in ("silence", "crash"):
            victims = sim.alive()[:int(arg or 1)]
            (sim.silence if cmd == "silence" else sim.crash)(victims)
            out: Any = [n.node_id.hex() for n in victims]
        elif cmd == "stats":
            out = sim.stats()
        else:
            out = {"error": f"unknown command {cmd!r}: silence N | crash N | stats | quit"}
        print("OK " + json.dumps(out), flush=True)
    await sim.close()


def main(argv: list[str] | None = None) -> None:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except Exception:  # noqa: BLE001
        pass
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
