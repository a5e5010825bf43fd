"""The replica's side of a vLLM engine spread over several nodes (vLLM's own multi-node mode).

The replica is rank 0: it runs vLLM's engine core and its node's workers in its own process
tree. For the other nodes of its placement group it starts `EngineNodeWorker` actors (one per
bundle, each pinned to its bundle), and the first on each node starts that node's workers,
which join rank 0 through `master_addr:master_port`. Everything here goes through the public
raylite API.

Lifecycle: `start()` -> the engine starts (rank 0 with `rank0_kwargs()`, the nodes' workers
with theirs) -> `check()` on every health check raises once a node's workers are gone ->
`shutdown()` kills the actors (they die with the replica anyway: it owns them).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from raylite.serve.llm._internal.engine_layout import (
    EngineLayout,
    one_node_threads_bind,
    plan_layout,
)
from raylite.serve.llm._internal.engine_node import EngineNodeWorker
from raylite.util._net import IFNAME_VARIABLES, interface_for_ip

_NOT_ACTOR_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}


@dataclass
class EngineGroup:
    """A started multi-node engine's other nodes, as the replica sees them."""

    layout: EngineLayout
    master_port: int
    is_cpu: bool
    actors: list[Any] = field(default_factory=list)
    leaders: dict[int, Any] = field(default_factory=dict)  # node_rank -> its leader actor
    runs: dict[int, Any] = field(default_factory=dict)  # node_rank -> ObjectRef of run()
    cpus: dict[int, list[int]] = field(default_factory=dict)  # node_rank -> cores there
    gpus: dict[int, list[str]] = field(default_factory=dict)  # node_rank -> GPU ids there
    # node_rank -> the interface holding the node's cluster IP, as found on that node
    ifnames: dict[int, str] = field(default_factory=dict)

    @classmethod
    def plan(cls, world_size: int, is_cpu: bool) -> EngineGroup | None:
        """The group of this replica's engine, or None where the engine fits on its node and
        its bundles there hold no GPU (then the replica's own process tree is all it needs)."""
        import raylite
        from raylite.util import get_current_placement_group, placement_group_table

        pg = get_current_placement_group()
        if pg is None:
            return None
        table = placement_group_table(pg)
        bundle_nodes = {int(i): n for i, n in table["bundles_to_node_id"].items()}
        bundles = {int(i): b for i, b in table["bundles"].items()}
        me = raylite.get_runtime_context().get_node_id()
        local_gpu_bundles = [i for i in sorted(bundle_nodes)
                             if bundle_nodes[i] == me and bundles[i].get("GPU", 0) > 0]
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in raylite.nodes() if n.get("Alive")}
        layout = plan_layout(bundle_nodes, ips, me, world_size)
        if not layout.spans_nodes and not local_gpu_bundles:
            return None
        group = cls(layout, _free_port(layout.master_addr) if layout.spans_nodes else 0, is_cpu)
        group._hold_local_gpus(pg, local_gpu_bundles, bundles)
        group._start_actors(pg, bundles)
        return group

    def _hold_local_gpus(self, pg: Any, indices: list[int], bundles: dict[int, dict[str, float]]) -> None:
        """The GPUs of the replica's node: one holder actor per bundle there that has GPUs,
        bundle 0 included (the replica itself asks for none), so raylite assigns the node's
        devices for those bundles and no other work gets them. The engine's processes on
        this node see exactly these ids (node_env(0)), never the machine's other GPUs."""
        import raylite
        from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        holder_cls = raylite.remote(EngineNodeWorker)
        holders = [holder_cls.options(
            num_cpus=0, num_gpus=bundles[i]["GPU"], max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
        ).remote() for i in indices]
        self.actors.extend(holders)
        me = self.layout.nodes[0].node_id
        for i, where in zip(indices, raylite.get([h.where.remote() for h in holders])):
            if where["node_id"] != me:
                raise RuntimeError(f"the GPU holder of bundle {i} started on node {where['node_id'][:12]}, "
                                   f"not the replica's ({me[:12]}); the placement group moved while "
                                   "the replica started")
            self.gpus.setdefault(0, []).extend(where["gpu_ids"])

    def _start_actors(self, pg: Any, bundles: dict[int, dict[str, float]]) -> None:
        import raylite
        from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        worker_cls = raylite.remote(EngineNodeWorker)
        placed: list[tuple[int, Any]] = []
        for node in self.layout.nodes[1:]:
            for index in node.bundle_indices:
                bundle = bundles[index]
                actor = worker_cls.options(
                    num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0),
                    resources={k: v for k, v in bundle.items() if k not in _NOT_ACTOR_RESOURCES},
                    max_concurrency=2, max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=index),
                ).remote()
                self.actors.append(actor)
                placed.append((node.node_rank, actor))
        wheres = raylite.get([a.where.remote() for _, a in placed])
        for (rank, actor), where in zip(placed, wheres):
            expected = self.layout.nodes[rank].node_id
            if where["node_id"] != expected:
                raise RuntimeError(f"an engine worker meant for node {expected[:12]} started on node "
                                   f"{where['node_id'][:12]}; the placement group moved while the "
                                   "replica started")
            self.leaders.setdefault(rank, actor)
            self.cpus.setdefault(rank, where["cpus"])
            if where.get("ifname"):
                self.ifnames.setdefault(rank, where["ifname"])
            self.gpus.setdefault(rank, []).extend(where["gpu_ids"])

    def node_env(self, node_rank: int, cpus: list[int] | None = None) -> dict[str, str]:
        """The environment of a node's engine processes: the address vLLM's message queues
        announce, the interface gloo and NCCL use (the one holding the node's cluster IP, so
        neither resolves the host name, which in containers often fails or names loopback),
        the CPU cores each local rank binds to, the node's GPUs. Variables the user set stay."""
        env: dict[str, str] = {}
        if not self.layout.spans_nodes:  # one node: only its GPUs (its cores: rank0_env)
            if self.gpus.get(node_rank):
                env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus[node_rank])
            return env
        ip = self.layout.nodes[node_rank].ip
        env["VLLM_HOST_IP"] = ip
        ifname = self.ifnames.get(node_rank) or (interface_for_ip(ip) if node_rank == 0 else None)
        if ifname:
            for var in IFNAME_VARIABLES:
                env[var] = os.environ.get(var) or ifname
        user_bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
        if self.is_cpu:
            env["VLLM_CPU_OMP_THREADS_BIND"] = user_bind or self.layout.omp_threads_bind(
                node_rank, cpus if cpus is not None else self.cpus[node_rank])
        if self.gpus.get(node_rank):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus[node_rank])
        return env

    def node_kwargs(self, engine_kwargs: dict[str, Any], node_rank: int) -> dict[str, Any]:
        return {**engine_kwargs, "nnodes": self.layout.nnodes, "node_rank": node_rank,
                "master_addr": self.layout.master_addr, "master_port": self.master_port,
                "distributed_executor_backend": "mp"}

    def rank0_kwargs(self, engine_kwargs: dict[str, Any]) -> dict[str, Any]:
        """Rank 0's engine arguments: vLLM's multi-node ones where the engine spans nodes."""
        return self.node_kwargs(engine_kwargs, 0) if self.layout.spans_nodes else dict(engine_kwargs)

    def start_nodes(self, engine_kwargs: dict[str, Any]) -> None:
        """Start every other node's workers; they wait for rank 0 at master_addr:master_port."""
        for node in self.layout.nodes[1:]:
            leader = self.leaders[node.node_rank]
            self.runs[node.node_rank] = leader.run.remote(
                self.node_kwargs(engine_kwargs, node.node_rank), self.node_env(node.node_rank))

    def check(self) -> None:
        """Raise if a node's engine workers have stopped (the engine cannot run without them)."""
        import raylite

        if not self.runs:
            return
        done, _ = raylite.wait(list(self.runs.values()), num_returns=1, timeout=0)
        if not done:
            return
        rank = next(r for r, ref in self.runs.items() if ref == done[0])
        node = self.layout.nodes[rank]
        try:
            raylite.get(done[0])
            why = "it returned"
        except Exception as exc:  # noqa: BLE001 - the reason is reported, whatever it is
            why = f"{type(exc).__name__}: {exc}"
        raise RuntimeError(f"the engine's workers on node {node.node_id[:12]} ({node.ip}, node_rank "
                           f"{rank}) are gone, so the engine cannot run: {why}")

    def processes(self) -> dict[str, list[int]]:
        """node id -> pids of the engine's processes on the other nodes (rank 0's are local);
        a node whose worker actor is gone is left out."""
        import raylite

        out: dict[str, list[int]] = {}
        for rank in sorted(self.leaders):
            try:
                out[self.layout.nodes[rank].node_id] = raylite.get(
                    self.leaders[rank].pids.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - dead with its node: check() reports it
                continue
        return out

    def shutdown(self) -> None:
        import raylite

        for actor in self.actors:
            try:
                raylite.kill(actor)
            except Exception:  # noqa: BLE001 - already gone with its node
                pass
        self.actors.clear()


def rank0_env(group: EngineGroup | None, is_cpu: bool, world_size: int,
              cpus: list[int]) -> dict[str, str]:
    """The environment the engine's processes on the replica's node start with (set in the
    replica before vLLM starts; its processes inherit it): the group's node_env(0) (address,
    cores, and exactly the GPUs raylite assigned for the node's bundles), or on one node
    without GPU bundles the CPU thread binding of its ranks."""
    if group is not None:
        env = group.node_env(0, cpus)
        if is_cpu and not group.layout.spans_nodes and world_size > 1 \
                and not os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
            env["VLLM_CPU_OMP_THREADS_BIND"] = one_node_threads_bind(world_size, cpus)
        return env
    if is_cpu and world_size > 1 and not os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        # vLLM's automatic binding refuses several ranks on one NUMA node
        return {"VLLM_CPU_OMP_THREADS_BIND": one_node_threads_bind(world_size, cpus)}
    return {}


def _free_port(ip: str) -> int:
    """A port free on this node for rank 0's rendezvous (torch.distributed's TCP store)."""
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]
