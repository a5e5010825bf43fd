"""Where the ranks of one vLLM engine run: the replica's placement group, read as nodes.

Pure (no raylite, no vLLM): from which node holds each bundle, decide whether the engine spans
several nodes and, if so, each node's `node_rank`, which bundles it holds, and the CPU cores
each rank's OpenMP threads are bound to. vLLM's own multi-node mode (`nnodes`, `node_rank`,
`master_addr`) starts the same number of workers on every node, so a group whose bundles are
spread unevenly is refused here with what to change.

Worked example: tensor_parallel_size=2 x pipeline_parallel_size=2, four 1-CPU bundles, bundles
0 and 1 on node A (the replica's), 2 and 3 on node B -> nnodes=2, local_world_size=2, A is
node_rank 0 with bundles (0, 1), B is node_rank 1 with bundles (2, 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineNode:
    """One node of the engine: vLLM's node_rank, its address, the bundles it holds."""

    node_id: str
    ip: str
    node_rank: int
    bundle_indices: tuple[int, ...]


@dataclass(frozen=True)
class EngineLayout:
    """The nodes of one engine, node_rank order; nodes[0] is the replica's (rank 0's)."""

    nodes: tuple[EngineNode, ...]
    world_size: int

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def spans_nodes(self) -> bool:
        return len(self.nodes) > 1

    @property
    def local_world_size(self) -> int:
        return self.world_size // len(self.nodes)

    @property
    def master_addr(self) -> str:
        return self.nodes[0].ip

    def one_machine(self) -> bool:
        """All nodes on one address: node daemons sharing a machine (tests, a laptop)."""
        return len({n.ip for n in self.nodes}) == 1

    def omp_threads_bind(self, node_rank: int, cpus: Sequence[int]) -> str:
        """VLLM_CPU_OMP_THREADS_BIND for the node of `node_rank` ("0|1": local rank 0 on core
        0, local rank 1 on core 1), given the cores that node may use. Nodes that share one
        machine split its cores among all ranks, so no two ranks spin on the same core; nodes
        on their own machines split their own cores among their local ranks."""
        local = self.local_world_size
        if self.one_machine():
            slots, first = self.world_size, node_rank * local
        else:
            slots, first = local, 0
        return "|".join(_cores_for(sorted(cpus), first + i, slots) for i in range(local))


def one_node_threads_bind(world_size: int, cpus: Sequence[int]) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for an engine of `world_size` ranks all on this node."""
    node = EngineNode("", "", 0, ())
    return EngineLayout((node,), world_size).omp_threads_bind(0, cpus)


def _cores_for(cpus: list[int], slot: int, slots: int) -> str:
    """Slot `slot` of `slots` equal shares of `cpus` (a core is shared when there are fewer
    cores than slots), as a core list vLLM reads ("0", "2,3")."""
    if not cpus:
        raise ValueError("no CPU cores are available to bind the engine's threads to")
    if len(cpus) < slots:
        return str(cpus[slot % len(cpus)])
    share = len(cpus) // slots
    return ",".join(str(c) for c in cpus[slot * share:(slot + 1) * share])


def plan_layout(bundle_nodes: Mapping[int, str], node_ips: Mapping[str, str], replica_node: str,
                world_size: int) -> EngineLayout:
    """The layout of an engine of `world_size` ranks over a placement group whose bundle i is
    on node `bundle_nodes[i]`; the replica (rank 0) runs on `replica_node`, in bundle 0."""
    if not bundle_nodes or world_size <= 1:
        return EngineLayout((EngineNode(replica_node, node_ips.get(replica_node, ""), 0, (0,)),), 1)
    by_node: dict[str, list[int]] = {}
    for index in sorted(bundle_nodes):
        by_node.setdefault(bundle_nodes[index], []).append(index)
    if len(by_node) == 1:
        return EngineLayout((EngineNode(replica_node, node_ips.get(replica_node, ""), 0,
                                        tuple(sorted(bundle_nodes))),), world_size)
    if len(bundle_nodes) != world_size:
        raise ValueError(
            f"the replica's placement group has {len(bundle_nodes)} bundles on {len(by_node)} nodes, "
            f"but the engine has {world_size} ranks (tensor_parallel_size x pipeline_parallel_size); "
            "an engine across nodes needs one bundle per rank: drop placement_group_config.bundles "
            "or give exactly that many")
    if replica_node not in by_node:
        raise ValueError(f"the replica runs on node {replica_node[:12]}, which holds none of its "
                         "placement group's bundles")
    counts = {node: len(b) for node, b in by_node.items()}
    if len(set(counts.values())) != 1:
        spread = ", ".join(f"node {n[:12]}: bundles {by_node[n]}" for n in by_node)
        raise ValueError(
            f"vLLM runs the same number of ranks on every node of an engine, but the placement "
            f"group's {world_size} bundles landed unevenly ({spread}). Use "
            "placement_group_config={'strategy': 'STRICT_SPREAD'} (one rank per node) or give "
            "nodes room for an equal share of the bundles")
    order = [replica_node] + sorted((n for n in by_node if n != replica_node),
                                    key=lambda n: by_node[n][0])
    missing = [n[:12] for n in order if not node_ips.get(n)]
    if missing:
        raise ValueError(f"no address is known for node(s) {missing} of the placement group "
                         "(did a node die while the replica started?)")
    nodes = tuple(EngineNode(n, node_ips[n], rank, tuple(by_node[n])) for rank, n in enumerate(order))
    return EngineLayout(nodes, world_size)
