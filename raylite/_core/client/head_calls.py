"""The public layer's questions to the head (and to the nodes), each one method.

The public modules (api, actor, placement_group, _state, internal_kv, runtime_context,
_runtime_env) never build wire messages: they call these methods of their CoreAPI
(core_api.py), and only this module turns them into protocol messages. CoreClient and the Ray
Client's RemoteClient both inherit it: it needs only what both provide (`head_request`,
`head_send`, `node_request`, `run_sync`, an awaitable `head.request`, `connection`).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from raylite._core import protocol as P

# how long list_objects() waits for one node or one process to answer
OBJECT_TABLES_TIMEOUT_S = 5.0
# an actor that ended itself: what its callers' RayActorError says (Ray's names exit_actor too)
EXIT_ACTOR_REASON = "ended by exit_actor() (the actor's own code asked it to exit)"


class HeadCalls:
    """Cluster, actor, key-value, placement-group and autoscaler requests, by name."""

    if TYPE_CHECKING:  # provided by the client this is mixed into
        head: Any
        node: Any
        namespace: str
        node_id: bytes
        node_ip: str
        address: str
        kind: str
        loop: asyncio.AbstractEventLoop | None

        def head_request(self, msg: P.Message, timeout: float | None = None) -> Any: ...
        def head_send(self, msg: P.Message) -> None: ...
        def node_request(self, msg: P.Message, timeout: float | None = None) -> Any: ...
        def run_sync(self, coro: Any, timeout: float | None = None) -> Any: ...
        def owned_objects(self) -> list: ...
        async def connection(self, address: str) -> Any: ...

    def return_idle_leases(self) -> list[asyncio.Future]:
        """Give back the leases kept idle for reuse; the futures are the node's answers.

        A client that keeps no idle leases (the Ray Client's RemoteClient) has none to give
        back; CoreClient overrides this with its lease table's.
        """
        return []

    # ------------------------------------------------------------ the cluster
    def cluster_info(self) -> P.ClusterInfo:
        """The head's nodes (dicts: node_id, alive, ip, total, available, labels, ...)."""
        return self.head_request(P.GetClusterInfo())

    def local_node_info(self) -> P.GetNodeInfoReply:
        """This process's node as it sees itself now (no heartbeat lag).

        The leases this process keeps idle for a moment, to reuse their workers for the next
        task, go back first: otherwise `available_resources()` read right after the work would
        count them as used, where Ray returns an idle worker at once. The return travels on the
        same connection as the question, so the node has it before it answers.
        """
        async def ask() -> P.GetNodeInfoReply:
            answered = self.return_idle_leases()
            if answered:  # the node's answers to the cancelled requests (a grant goes back)
                await asyncio.wait(answered, timeout=2.0)
            return await self.node.request(P.GetNodeInfo())

        return self.run_sync(ask())

    def object_tables(self, timeout_s: float | None = None) -> tuple[list[tuple[dict, Any]], dict[str, Any]]:
        """For list_objects(): [(node, its NodeInfo)] for every alive node that answered, and
        {process address: (kind, pid, ip, owned objects)} for every driver and worker they know."""
        return self.run_sync(self._object_tables(), timeout=timeout_s)

    async def _object_tables(self) -> tuple[list[tuple[dict, Any]], dict[str, Any]]:
        cluster = await asyncio.wait_for(self.head.request(P.GetClusterInfo()), OBJECT_TABLES_TIMEOUT_S)
        node_infos = []
        for n in cluster.nodes:
            if not n.get("alive", True):
                continue
            try:
                conn = self.node if n["node_id"] == self.node_id else await self.connection(n["address"])
                info = await asyncio.wait_for(conn.request(P.GetNodeInfo()), OBJECT_TABLES_TIMEOUT_S)
                node_infos.append((n, info))
            except Exception:  # noqa: BLE001  a node going away: list what the others know
                continue
        addresses: dict[str, tuple[str, int, str]] = {}  # address -> (kind, pid, ip)
        for n, info in node_infos:
            for _wid, kind, address, pid in getattr(info, "clients", []) or []:
                if address:
                    addresses[address] = (kind, pid, n.get("ip", ""))
        processes: dict[str, Any] = {self.address: (self.kind, os.getpid(), self.node_ip, self.owned_objects())}

        async def ask(address: str) -> None:
            try:
                conn = await self.connection(address)
                reply = await asyncio.wait_for(conn.request(P.ListOwnedObjects()), OBJECT_TABLES_TIMEOUT_S)
                processes[address] = (reply.kind, reply.pid, addresses[address][2], reply.objects)
            except Exception:  # noqa: BLE001  exited meanwhile
                pass

        await asyncio.gather(*(ask(a) for a in addresses if a != self.address))
        return node_infos, processes

    # ------------------------------------------------------------ actors
    def named_actor(self, name: str, namespace: str) -> P.GetNamedActorReply:
        """The live actor called `name` in `namespace` (reply.actor_id is b"" when there is none)."""
        return self.head_request(P.GetNamedActor(name, namespace))

    def list_named_actors(self, all_namespaces: bool) -> list:
        """[{"name", "namespace"}] of the named actors alive in this namespace (or all)."""
        return self.head_request(P.ListNamedActors(all_namespaces, self.namespace)).actors

    def actor_restarts(self, actor_id: bytes) -> int:
        """How often the head has restarted this actor."""
        return self.head_request(P.GetActorInfo(actor_id, False, -1)).num_restarts

    def exit_actor(self, actor_id: bytes, timeout_s: float) -> None:
        """Tell the head this actor ends itself (no restart, no confirmation awaited)."""
        self.run_sync(self.head.request(P.KillActor(actor_id, True, False, EXIT_ACTOR_REASON)), timeout=timeout_s)

    # ------------------------------------------------------------ the key-value store
    def kv_get(self, namespace: str, key: bytes) -> bytes | None:
        return self.head_request(P.KvGet(namespace, key)).value

    def kv_put(self, namespace: str, key: bytes, value: bytes, overwrite: bool) -> bool:
        """Store the value; True when the key existed before."""
        return bool(self.head_request(P.KvPut(namespace, key, value, overwrite)).value)

    def kv_del(self, namespace: str, key: bytes, by_prefix: bool) -> int:
        """How many keys were deleted."""
        return int(self.head_request(P.KvDel(namespace, key, by_prefix)).value or 0)

    def kv_keys(self, namespace: str, prefix: bytes) -> list[bytes]:
        return list(self.head_request(P.KvKeys(namespace, prefix)).value)

    async def kv_get_async(self, namespace: str, key: bytes) -> bytes | None:
        return await self._head_async(P.KvGet(namespace, key))

    async def kv_put_async(self, namespace: str, key: bytes, value: bytes, overwrite: bool) -> bool:
        return bool(await self._head_async(P.KvPut(namespace, key, value, overwrite)))

    async def kv_del_async(self, namespace: str, key: bytes, by_prefix: bool) -> int:
        return int(await self._head_async(P.KvDel(namespace, key, by_prefix)) or 0)

    async def kv_keys_async(self, namespace: str, prefix: bytes) -> list[bytes]:
        return list(await self._head_async(P.KvKeys(namespace, prefix)))

    async def _head_async(self, msg: P.Message) -> Any:
        """A KvReply's value, awaited from any event loop (the request runs on this client's)."""
        assert self.loop is not None, "the client's I/O loop is not running"
        future = asyncio.run_coroutine_threadsafe(self.head.request(msg), self.loop)
        return (await asyncio.wrap_future(future)).value

    # ------------------------------------------------------------ placement groups
    def create_placement_group(self, pg_id: bytes, bundles: list[dict[str, int]], strategy: str, name: str,
                               detached: bool) -> None:
        """Ask the head to reserve `bundles` (fixed-point). A named group is awaited (other
        processes may look it up by name at once); an unnamed one is only sent: it reaches
        the head before anything this process asks about it, so no round trip per group."""
        msg = P.CreatePlacementGroup(pg_id, bundles, strategy, name, self.namespace, detached)
        if name:
            self.head_request(msg)
        else:
            self.head_send(msg)

    def remove_placement_group(self, pg_id: bytes) -> None:
        self.head_send(P.RemovePlacementGroup(pg_id))

    def placement_group_info(self, pg_id: bytes, wait: bool, timeout_s: float) -> P.PlacementGroupInfo:
        """The group's state; with `wait`, the head answers once it is placed or `timeout_s` passed."""
        return self.head_request(P.GetPlacementGroup(pg_id, wait, timeout_s))

    async def placement_group_info_async(self, pg_id: bytes, wait: bool, timeout_s: float) -> P.PlacementGroupInfo:
        """placement_group_info, awaited on this client's I/O loop (a promise's producer)."""
        return await self.head.request(P.GetPlacementGroup(pg_id, wait, timeout_s))

    def placement_group_by_name(self, name: str, namespace: str) -> P.PlacementGroupInfo:
        return self.head_request(P.GetPlacementGroup(b"", False, -1.0, name, namespace))

    def list_placement_groups(self) -> list[dict]:
        return self.head_request(P.ListPlacementGroups()).groups

    # ------------------------------------------------------------ the autoscaler
    def set_resource_request(self, request: bytes) -> None:
        """Replace request_resources()'s standing demand (JSON {"bundles": [...]}; b"" drops it)."""
        self.head_request(P.RequestResources(request))
