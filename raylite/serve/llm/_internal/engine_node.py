"""The actor that runs one node's share of a multi-node vLLM engine (not rank 0's node).

It does on its node what `vllm serve --headless` does: build the engine's config with this
node's `node_rank` and start vLLM's multiprocessing executor, whose workers join rank 0's
(the replica's) through `master_addr:master_port`, then wait on them. The replica creates one
per bundle of the other nodes, inside its placement group, so each holds its bundle's
resources (and, on GPUs, raylite's device assignment); the first one on a node is that node's
leader and runs the workers, the others only report their devices.

Lifecycle: created by the replica (its owner: it dies with the replica) -> `run()` blocks
while the workers live -> returns an error when one dies, which makes the replica unhealthy
so Serve replaces it. Killing the actor ends its workers (they watch their parent; a watcher
process covers a kill outright).
"""

from __future__ import annotations

import os
from typing import Any


class EngineNodeWorker:
    """One bundle's process of a multi-node engine; see the module docstring."""

    def __init__(self) -> None:
        self._reaper: Any = None

    def where(self) -> dict[str, Any]:
        """This process's node, pid, assigned GPUs, usable cores and the interface holding the
        node's cluster IP (for the node's environment: only this node can see its interfaces)."""
        import raylite
        from raylite.util import get_node_ip_address
        from raylite.util._net import interface_for_ip

        ctx = raylite.get_runtime_context()
        gpus = ctx.get_accelerator_ids().get("GPU", [])
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "gpu_ids": [str(g) for g in gpus],
                "cpus": sorted(os.sched_getaffinity(0)),
                "ifname": interface_for_ip(get_node_ip_address()) or ""}

    def pids(self) -> list[int]:
        """This process and the engine workers it started (the processes of the engine here;
        not the watcher that reaps them)."""
        import psutil

        me = psutil.Process()
        reaper = self._reaper.pid if self._reaper is not None else None
        return [me.pid, *(c.pid for c in me.children(recursive=True) if c.pid != reaper)]

    def run(self, engine_kwargs: dict[str, Any], env: dict[str, str]) -> str:
        """Start this node's engine workers and wait on them; raises once one has died."""
        os.environ.update(env)
        from vllm import AsyncEngineArgs
        from vllm.v1.executor.multiproc_executor import MultiprocExecutor

        from raylite.serve.llm._internal.reaper import watch_children

        config = AsyncEngineArgs(**engine_kwargs).create_engine_config(headless=True)
        executor = MultiprocExecutor(config, monitor_workers=False)
        self._reaper = watch_children()
        executor.start_worker_monitor(inline=True)  # returns when a worker process has exited
        codes = [h.proc.exitcode for h in executor.workers]
        raise RuntimeError(f"the engine's worker processes on this node exited (exit codes {codes})")
