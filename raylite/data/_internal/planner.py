"""Logical plan -> physical operators, with operator fusion.

Fusion rules (each saves an object-store hop per block):

- Read -> map-like ops run in one task: the read task is the first stage.
- map-like -> map-like (both tasks) fuse when the downstream op asks for no
  resources of its own, or both ask for the same.
- tasks -> actor pool: upstream task stages with default resources move into
  the actor (so ``read -> map_batches(Cls, concurrency=2)`` needs no CPUs
  beyond the actors').
- A limit adds a per-task ``LimitStage`` to the op before it (readers stop
  early) and a ``LimitOperator`` that enforces the global count.

An operator consumed by two downstream operators (``ds.union(ds)``) is never
fused into either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raylite.data._internal import logical as L
from raylite.data._internal.operators import (
    ActorPoolMapOperator,
    AllToAllOperator,
    InputDataBuffer,
    LimitOperator,
    MapOperator,
    PhysicalOperator,
    UnionOperator,
    ZipOperator,
)
from raylite.data._internal.submitter import TaskOptions, TaskSubmitter
from raylite.data._internal.transforms import LimitStage, Stage, TransformChain
from raylite.data.context import DataContext


def autodetect_parallelism(size_bytes: int | None, cpus: float, ctx: DataContext) -> int:
    """Ray's rule: enough blocks for 2x the CPUs, ~200 when data is big, blocks under the max size."""
    size = int(size_bytes or 0)
    p = max(min(ctx.read_op_min_num_blocks, size // max(1, ctx.target_min_block_size)), int(2 * cpus))
    return max(1, p, math.ceil(size / max(1, ctx.target_max_block_size)))


@dataclass
class _MapSpec:
    """A physical map operator under construction (stages are appended while fusing)."""

    names: list[str]
    stages: list[Stage]
    deps: list[PhysicalOperator]
    remote_args: dict[str, Any]
    compute: Any = None
    read_tasks: list[Any] | None = None
    min_rows: int | None = None
    default_args: bool = True

    def build(self, ctx: DataContext) -> PhysicalOperator:
        chain = TransformChain(list(self.stages))
        name = "->".join(self.names)
        if isinstance(self.compute, L.ActorPoolStrategy):
            # one call at a time per actor unless map_batches(max_concurrency=N) asks for a
            # threaded actor (as Ray allows; the LLM engine stage overlaps its batches so)
            options = TaskOptions.from_ray_remote_args(
                {"max_concurrency": 1, **self.remote_args}, default_num_cpus=1.0
            )
            return ActorPoolMapOperator(
                name, chain, self.deps, options, read_tasks=self.read_tasks, min_rows_per_bundle=self.min_rows,
                pool_bounds=self.compute.bounds(),
                max_tasks_in_flight=self.compute.max_tasks_in_flight_per_actor,
                preserve_order=True,
            )
        options = TaskOptions.from_ray_remote_args(self.remote_args, default_num_cpus=1.0)
        cap = self.compute.size if isinstance(self.compute, L.TaskPoolStrategy) else None
        return MapOperator(
            name, chain, self.deps, options, read_tasks=self.read_tasks, min_rows_per_bundle=self.min_rows,
            max_concurrency=cap, preserve_order=True,
        )


class Planner:
    def __init__(self, submitter: TaskSubmitter, context: DataContext) -> None:
        self.submitter = submitter
        self.context = context
        self._consumers: dict[int, int] = {}
        self._memo: dict[int, PhysicalOperator] = {}
        self._ordered: list[PhysicalOperator] = []

    def plan(self, terminal: L.LogicalOperator) -> list[PhysicalOperator]:
        for op in terminal.post_order():
            for i in op.inputs:
                self._consumers[id(i)] = self._consumers.get(id(i), 0) + 1
        sink = self._convert(terminal)
        return _topo_order(sink)

    # ------------------------------------------------------------ conversion

    def _convert(self, lop: L.LogicalOperator) -> PhysicalOperator:
        if id(lop) in self._memo:
            return self._memo[id(lop)]
        spec = self._as_spec(lop)
        phys = spec.build(self.context) if isinstance(spec, _MapSpec) else spec
        self._memo[id(lop)] = phys
        return phys

    def _as_spec(self, lop: L.LogicalOperator) -> _MapSpec | PhysicalOperator:
        """Either a fusable map spec or a finished physical operator."""
        if isinstance(lop, L.Read):
            return self._read_spec(lop)
        if isinstance(lop, L.InputData):
            return InputDataBuffer("Input", blocks=lop.blocks, bundles=lop.bundles)
        if isinstance(lop, L.MapLike):
            return self._map_spec(lop)
        if isinstance(lop, L.Limit):
            return self._limit(lop)
        if isinstance(lop, L.AllToAll):
            assert lop.bulk_fn is not None
            return AllToAllOperator(lop.name, [self._convert(lop.inputs[0])], lop.bulk_fn)
        if isinstance(lop, L.Union):
            return UnionOperator("Union", [self._convert(i) for i in lop.inputs])
        if isinstance(lop, L.Zip):
            return ZipOperator("Zip", [self._convert(i) for i in lop.inputs])
        if isinstance(lop, L.Join):
            from raylite.data._internal.join import JoinOperator

            return JoinOperator(lop.name, [self._convert(i) for i in lop.inputs], lop.spec)
        raise TypeError(f"No physical plan for logical operator {type(lop).__name__}")

    def _read_spec(self, lop: L.Read) -> _MapSpec:
        ds = lop.datasource
        parallelism = lop.parallelism
        if parallelism is None or parallelism <= 0:
            parallelism = autodetect_parallelism(
                ds.estimate_inmemory_data_size(), self.submitter.total_cpus(), self.context
            )
        read_tasks = ds.get_read_tasks(parallelism)
        return _MapSpec([ds.get_name()], [], [], dict(lop.ray_remote_args), read_tasks=read_tasks,
                        default_args=not lop.ray_remote_args)

    def _upstream_spec(self, lop: L.LogicalOperator) -> _MapSpec | None:
        """The input as a still-open map spec when it can absorb more stages."""
        up = lop.inputs[0]
        if self._consumers.get(id(up), 0) != 1 or id(up) in self._memo:
            return None
        if isinstance(up, L.Read):
            return self._read_spec(up)
        if isinstance(up, L.MapLike):
            return self._map_spec(up)
        return None

    def _map_spec(self, lop: L.MapLike) -> _MapSpec:
        assert lop.stage is not None
        up = self._upstream_spec(lop)
        actor = isinstance(lop.compute, L.ActorPoolStrategy)
        if up is not None and not isinstance(up.compute, L.ActorPoolStrategy):
            fuse = False
            if actor:
                fuse = up.default_args
            elif not lop.ray_remote_args or lop.ray_remote_args == up.remote_args or up.default_args:
                fuse = True
            if fuse:
                up.names.append(lop.name)
                up.stages.append(lop.stage)
                if lop.ray_remote_args:
                    up.remote_args = dict(lop.ray_remote_args)
                    up.default_args = False
                if lop.compute is not None:
                    up.compute = lop.compute
                if lop.min_rows_per_bundle:
                    up.min_rows = max(up.min_rows or 0, lop.min_rows_per_bundle)
                return up
        if up is not None:  # not fusable: the upstream becomes its own operator
            phys = up.build(self.context)
            self._memo[id(lop.inputs[0])] = phys
            deps = [phys]
        else:
            deps = [self._convert(lop.inputs[0])]
        return _MapSpec([lop.name], [lop.stage], deps, dict(lop.ray_remote_args), compute=lop.compute,
                        min_rows=lop.min_rows_per_bundle, default_args=not lop.ray_remote_args)

    def _limit(self, lop: L.Limit) -> PhysicalOperator:
        up_lop = lop.inputs[0]
        spec = None
        if self._consumers.get(id(up_lop), 0) == 1 and id(up_lop) not in self._memo:
            if isinstance(up_lop, (L.Read, L.MapLike)):
                spec = self._read_spec(up_lop) if isinstance(up_lop, L.Read) else self._map_spec(up_lop)
        if spec is not None:
            spec.stages.append(LimitStage(lop.limit))
            up = spec.build(self.context)
            self._memo[id(up_lop)] = up
        else:
            up = self._convert(up_lop)
        return LimitOperator(f"Limit[{lop.limit}]", [up], lop.limit)


def _topo_order(sink: PhysicalOperator) -> list[PhysicalOperator]:
    return L._post_order(sink, lambda op: op.deps)


def plan(terminal: L.LogicalOperator, submitter: TaskSubmitter, context: DataContext) -> list[PhysicalOperator]:
    """Physical operators for ``terminal``'s DAG, in topological order (last = output)."""
    return Planner(submitter, context).plan(terminal)
