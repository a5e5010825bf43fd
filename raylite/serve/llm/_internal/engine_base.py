"""The seam between LLMServer and an inference engine (vLLM, or the transformers fallback).

An engine turns token ids into a stream of per-choice deltas and texts into embeddings. It runs
on its own thread and event loop (`EngineThread`), so the replica's own loop, whatever runs it,
only awaits queues: a model load that fails raises in the replica's constructor.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class SamplingOptions:
    """What one request asks of the engine, independent of the engine."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None  # number of top alternatives; None = no logprobs
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    lora: Any = None  # the request's LoRA adapter (lora.Adapter), or None for the base model


@dataclass
class ChoiceDelta:
    """New output of one choice since the last delta."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # one per token
    finish_reason: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    max_model_len: int
    engine: str
    supports_generate: bool
    supports_embed: bool
    created: int


class Engine:
    """Interface of an engine. All coroutines run on the engine's own loop."""

    name = "engine"

    async def start(self) -> None:
        raise NotImplementedError

    @property
    def max_model_len(self) -> int:
        raise NotImplementedError

    def supports(self) -> tuple[bool, bool]:
        """(generate, embed)."""
        return True, False

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str:
        raise NotImplementedError

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        raise NotImplementedError

    def generate(self, prompt_token_ids: list[int], options: SamplingOptions,
                 request_id: str) -> AsyncIterator[list[ChoiceDelta]]:
        raise NotImplementedError

    async def abort(self, request_id: str) -> None:
        return None

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        raise NotImplementedError

    async def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


class EngineThread:
    """Runs an engine on a daemon thread with its own event loop; callers await from any loop."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"llm-engine-{engine.name}")
        self._thread.start()

    def start_blocking(self, timeout_s: float | None = None) -> None:
        """Start the engine; raises the engine's own error when the model cannot be loaded."""
        asyncio.run_coroutine_threadsafe(self.engine.start(), self._loop).result(timeout_s)

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(), self._loop))

    async def stream(self, make: Callable[[], AsyncIterator[T]],
                     on_cancel: Callable[[], Awaitable[None]] | None = None,
                     interval_s: float = 0.0) -> AsyncIterator[list[T]]:
        """Iterate an engine-side async iterator from the caller's loop.

        Yields lists: every item that is ready when the caller looks, so a consumer slower
        than the engine (a busy proxy, a slow client) gets fewer, larger messages. With
        `interval_s`, the first list goes at once (time to first token is not delayed) and
        later ones at most every `interval_s`: fewer messages through the proxy and ingress
        per token, which is what limits throughput on a few cores.
        """
        caller = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for item in make():
                    caller.call_soon_threadsafe(queue.put_nowait, ("item", item))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as is
                caller.call_soon_threadsafe(queue.put_nowait, ("error", exc))
                return
            caller.call_soon_threadsafe(queue.put_nowait, ("done", None))

        fut = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        finished = False
        last_yield = None
        try:
            while True:
                if interval_s and last_yield is not None:
                    wait_s = last_yield + interval_s - caller.time()
                    if wait_s > 0:
                        await asyncio.sleep(wait_s)
                batch = [await queue.get()]
                while not queue.empty():  # whatever else is ready goes out in the same message
                    batch.append(queue.get_nowait())
                items = [value for kind, value in batch if kind == "item"]
                if items:
                    yield items
                    last_yield = caller.time()
                kind, value = batch[-1]
                if kind == "error":
                    finished = True
                    raise value
                if kind == "done":
                    finished = True
                    return
        finally:
            if not finished:
                fut.cancel()
                if on_cancel is not None:
                    asyncio.run_coroutine_threadsafe(on_cancel(), self._loop)

    def shutdown(self) -> None:
        try:
            self.engine.shutdown()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
