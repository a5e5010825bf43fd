"""LLMServer: the deployment class that hosts one model's engine and speaks OpenAI's bodies.

The ingress has already validated each body (openai_api_models); this class turns it into a
prompt (chat template, token ids), checks it against max_model_len, runs the engine and builds
the response. Client errors come back as values ({"__openai_error__": status, "body": ...}),
never raised, so they cross the handle unchanged whatever the transport does with exceptions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from raylite.serve.llm._internal import responses as R
from raylite.serve.llm._internal.engine_base import Engine, EngineThread, ModelInfo, SamplingOptions
from raylite.serve.llm._internal.engines import make_engine
from raylite.serve.llm._internal.lora import Adapter, AdapterFetcher, split_model_id
from raylite.serve.llm.configs import LLMConfig
from raylite.serve.llm.openai_api_models import OpenAIHTTPError

logger = logging.getLogger("raylite.serve.llm")
ERROR_KEY = "__openai_error__"
DEFAULT_STREAM_BATCHING_INTERVAL_MS = 50.0


def as_error(exc: OpenAIHTTPError) -> dict[str, Any]:
    return {ERROR_KEY: exc.status_code, "body": exc.body()}


class LLMServer:
    """Hosts one model (Ray: `ray.serve.llm.deployment.LLMServer`).

    Lifecycle: constructing it loads the model (blocking; a load error raises here, so the
    deployment fails with the engine's message) -> serving -> `__del__` shuts the engine down.
    """

    def __init__(self, llm_config: LLMConfig | dict[str, Any], *,
                 engine: Engine | None = None) -> None:
        self._config = llm_config if isinstance(llm_config, LLMConfig) else LLMConfig(**llm_config)
        self._model_id = self._config.model_id
        # Ray Serve LLM's experimental knob (same name; Ray's default is 50 ms): streamed
        # tokens are sent at most this often after the first one.
        self._stream_interval_s = float(self._config.experimental_configs.get(
            "stream_batching_interval_ms", DEFAULT_STREAM_BATCHING_INTERVAL_MS)) / 1000.0
        started = time.monotonic()
        engine = engine or make_engine(self._config)
        self._thread = EngineThread(engine)
        try:
            self._thread.start_blocking()
        except Exception as exc:
            self._thread.shutdown()
            raise RuntimeError(
                f"Model {self._model_id!r} failed to load on engine {engine.name} from "
                f"{self._config.model_loading_config.model_source!r}: "  # type: ignore[union-attr]
                f"{type(exc).__name__}: {exc}") from exc
        self._engine = engine
        self._tokenizer = engine.tokenizer  # type: ignore[attr-defined]
        gen, emb = engine.supports()
        self._info = ModelInfo(self._model_id, engine.max_model_len, engine.name, gen, emb,
                               int(time.time()))
        logger.info("model %r loaded on %s in %.1f s (max_model_len=%d)", self._model_id,
                    engine.name, time.monotonic() - started, engine.max_model_len)

    # ---- introspection --------------------------------------------------------------------
    async def model_info(self) -> dict[str, Any]:
        i = self._info
        return {"id": i.model_id, "max_model_len": i.max_model_len, "engine": i.engine,
                "created": i.created, "supports_generate": i.supports_generate,
                "supports_embed": i.supports_embed, "lora": self._config.lora_config is not None}

    async def llm_config(self) -> LLMConfig:
        return self._config

    async def check_health(self) -> None:
        await self._thread.call(self._engine.check_health)

    async def engine_processes(self) -> dict[str, list[int]]:
        """node id -> pids of the engine's processes there: the replica's process tree on its
        node and, for an engine across nodes, the engine workers on the others."""
        import os

        where = getattr(self._engine, "engine_processes", None)
        if where is None:
            import raylite

            return {raylite.get_runtime_context().get_node_id(): [os.getpid()]}
        return await asyncio.to_thread(where)

    # ---- chat -----------------------------------------------------------------------------
    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            prompt, options = self._chat_prompt(body)
            options = await self._with_adapter(body, options)
        except OpenAIHTTPError as exc:
            return as_error(exc)
        acc = R.ChoiceAccumulator(options.n)
        async for steps in self._generate(prompt, options):
            for deltas in steps:
                acc.add(deltas)
        return R.chat_response(self._model_id, acc, len(prompt), bool(body.get("logprobs")))

    async def chat_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        try:
            prompt, options = self._chat_prompt(body)
            options = await self._with_adapter(body, options)
        except OpenAIHTTPError as exc:
            yield as_error(exc)
            return
        rid, created = R.new_id("chatcmpl"), int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        want_logprobs = bool(body.get("logprobs"))

        def chunk(choices: list[dict[str, Any]]) -> str:
            obj = {"id": rid, "object": "chat.completion.chunk", "created": created,
                   "model": self._model_id, "choices": choices}
            if include_usage:
                obj["usage"] = None
            return R.sse(obj)

        yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                      "logprobs": None, "finish_reason": None} for i in range(options.n)])
        completion_tokens = 0
        async for steps in self._generate(prompt, options, self._stream_interval_s):
            events = []
            for deltas in steps:
                choices = []
                for d in deltas:
                    completion_tokens += len(d.token_ids)
                    choices.append({"index": d.index,
                                    "delta": {"content": d.text} if d.text else {},
                                    "logprobs": R.chat_logprobs(d.logprobs, want_logprobs),
                                    "finish_reason": d.finish_reason})
                events.append(chunk(choices))
            yield "".join(events)
        if include_usage:
            yield R.sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                         "model": self._model_id, "choices": [],
                         "usage": R.usage(len(prompt), completion_tokens)})
        yield R.DONE

    def _chat_prompt(self, body: dict[str, Any]) -> tuple[list[int], SamplingOptions]:
        self._require_generate()
        messages = [{"role": m["role"], "content": _message_text(m.get("content"))}
                    for m in body["messages"]]
        try:
            text = self._tokenizer.apply_chat_template(messages)
        except ValueError as exc:
            raise OpenAIHTTPError(400, str(exc), param="messages")
        ids = self._tokenizer.encode(text, add_special_tokens=False)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        top = body.get("top_logprobs") or 0
        return ids, self._options(body, ids, limit, "messages",
                                  top if body.get("logprobs") else None)

    # ---- completions ------------------------------------------------------------------------
    async def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            prompts, options = self._completion_prompts(body)
            options = await self._with_adapter(body, options)
        except OpenAIHTTPError as exc:
            return as_error(exc)
        acc = R.ChoiceAccumulator(options.n * len(prompts))

        async def run(k: int, ids: list[int]) -> None:
            async for steps in self._generate(ids, options):
                for deltas in steps:
                    acc.add(deltas, offset=k * options.n)

        await asyncio.gather(*(run(k, ids) for k, ids in enumerate(prompts)))
        echo = None
        if body.get("echo"):
            echo = [self._tokenizer.decode(ids) for ids in prompts for _ in range(options.n)]
        return R.completion_response(self._model_id, acc, sum(len(p) for p in prompts),
                                     body.get("logprobs"), echo)

    async def completions_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        try:
            prompts, options = self._completion_prompts(body)
            options = await self._with_adapter(body, options)
        except OpenAIHTTPError as exc:
            yield as_error(exc)
            return
        if len(prompts) != 1:
            yield as_error(OpenAIHTTPError(400, "stream=true takes a single prompt; send one "
                                                "request per prompt", param="prompt"))
            return
        rid, created = R.new_id("cmpl"), int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        completion_tokens = 0
        async for steps in self._generate(prompts[0], options, self._stream_interval_s):
            events = []
            for deltas in steps:
                choices = []
                for d in deltas:
                    completion_tokens += len(d.token_ids)
                    choices.append({"index": d.index, "text": d.text,
                                    "logprobs": R.completion_logprobs(d.logprobs,
                                                                      body.get("logprobs")),
                                    "finish_reason": d.finish_reason})
                obj = {"id": rid, "object": "text_completion", "created": created,
                       "model": self._model_id, "choices": choices}
                if include_usage:
                    obj["usage"] = None
                events.append(R.sse(obj))
            yield "".join(events)
        if include_usage:
            yield R.sse({"id": rid, "object": "text_completion", "created": created,
                         "model": self._model_id, "choices": [],
                         "usage": R.usage(len(prompts[0]), completion_tokens)})
        yield R.DONE

    def _completion_prompts(self, body: dict[str, Any]) -> tuple[list[list[int]], SamplingOptions]:
        self._require_generate()
        prompt = body["prompt"]
        if isinstance(prompt, str):
            prompts = [self._tokenizer.encode(prompt)]
        elif prompt and all(isinstance(p, int) for p in prompt):
            prompts = [list(prompt)]
        else:
            prompts = [self._tokenizer.encode(p) for p in prompt]
        if not prompts or any(not p for p in prompts):
            raise OpenAIHTTPError(400, "prompt is empty", param="prompt")
        options = None
        for ids in prompts:
            options = self._options(body, ids, body.get("max_tokens"), "prompt", body.get("logprobs"))
        assert options is not None
        return prompts, options

    # ---- embeddings -------------------------------------------------------------------------
    async def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self._info.supports_embed:
            return as_error(OpenAIHTTPError(
                400, f"model {self._model_id!r} does not serve embeddings; deploy an embedding "
                     "model (for vLLM, engine_kwargs={'runner': 'pooling'})", param="model"))
        raw = body["input"]
        if isinstance(raw, str):
            inputs = [self._tokenizer.encode(raw)]
        elif raw and all(isinstance(x, int) for x in raw):
            inputs = [list(raw)]
        elif raw and all(isinstance(x, list) for x in raw):
            inputs = [list(x) for x in raw]
        else:
            inputs = [self._tokenizer.encode(x) for x in raw]
        if not inputs or any(not x for x in inputs):
            return as_error(OpenAIHTTPError(400, "input is empty", param="input"))
        for ids in inputs:
            if len(ids) > self._info.max_model_len:
                return as_error(OpenAIHTTPError(
                    400, f"This model's maximum context length is {self._info.max_model_len} "
                         f"tokens, but an input has {len(ids)} tokens. Shorten the input.",
                    param="input", code="context_length_exceeded"))
        vectors = await self._thread.call(lambda: self._engine.embed(inputs))
        return R.embedding_response(self._model_id, vectors, sum(len(x) for x in inputs),
                                    body.get("encoding_format", "float"), body.get("dimensions"))

    # ---- shared -----------------------------------------------------------------------------
    def _require_generate(self) -> None:
        if not self._info.supports_generate:
            raise OpenAIHTTPError(400, f"model {self._model_id!r} is an embedding model; use "
                                       "/v1/embeddings", param="model")

    def _options(self, body: dict[str, Any], ids: list[int], limit: int | None, what: str,
                 logprobs: int | None) -> SamplingOptions:
        max_len = self._info.max_model_len
        if len(ids) >= max_len or (limit is not None and len(ids) + limit > max_len):
            asked = f"{len(ids) + (limit or 0)} tokens ({len(ids)} in the {what}" + (
                f", {limit} in the completion)" if limit else ")")
            raise OpenAIHTTPError(
                400, f"This model's maximum context length is {max_len} tokens. However, you "
                     f"requested {asked}. Please reduce the length of the {what} or completion.",
                param=what, code="context_length_exceeded")
        stop = body.get("stop")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        return SamplingOptions(
            max_tokens=limit if limit is not None else max_len - len(ids),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p), n=int(body.get("n") or 1), stop=stops,
            seed=body.get("seed"), logprobs=logprobs,
            presence_penalty=float(body.get("presence_penalty") or 0.0),
            frequency_penalty=float(body.get("frequency_penalty") or 0.0))

    async def _with_adapter(self, body: dict[str, Any], options: SamplingOptions) -> SamplingOptions:
        """The request's options with its LoRA adapter where it names one ('base:adapter'),
        loaded on first use (LoraLLMServer); a plain server refuses adapter names."""
        base, adapter = split_model_id(str(body.get("model") or self._model_id))
        if adapter is None:
            return options
        raise OpenAIHTTPError(404, f"model {base!r} is served without LoRA adapters, so "
                                   f"{body.get('model')!r} does not exist; give its LLMConfig a "
                                   "lora_config (dynamic_lora_loading_path=...) to serve adapters",
                              type="not_found_error", param="model")

    def _generate(self, ids: list[int], options: SamplingOptions,
                  interval_s: float = 0.0) -> AsyncIterator[Any]:
        rid = uuid.uuid4().hex
        return self._thread.stream(lambda: self._engine.generate(ids, options, rid),
                                   on_cancel=lambda: self._engine.abort(rid),
                                   interval_s=interval_s)

    def __del__(self) -> None:
        thread = getattr(self, "_thread", None)
        if thread is not None:
            try:
                thread.shutdown()
            except Exception:  # noqa: BLE001 - best effort at interpreter exit
                pass


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


class LoraLLMServer(LLMServer):
    """An LLMServer that also serves LoRA adapters of its base model (see lora.py); built per
    config by `lora_server_class`, whose loader caps the adapters a replica holds."""

    def __init__(self, llm_config: LLMConfig | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(llm_config, **kwargs)
        lora = self._config.lora_config
        if lora is None or not lora.dynamic_lora_loading_path:
            raise ValueError(f"LLMConfig for model {self._model_id!r}: lora_config needs "
                             "dynamic_lora_loading_path (a local folder or s3://bucket/prefix holding "
                             "one sub-folder per adapter)")
        self._fetcher = AdapterFetcher(lora.dynamic_lora_loading_path, lora.max_download_tries)

    async def _with_adapter(self, body: dict[str, Any], options: SamplingOptions) -> SamplingOptions:
        model = str(body.get("model") or self._model_id)
        base, adapter = split_model_id(model)
        if adapter is None:
            return options
        if base != self._model_id:
            raise OpenAIHTTPError(404, f"model {model!r}: {base!r} is not this server's base model "
                                       f"({self._model_id!r})", type="not_found_error", param="model")
        try:
            loaded = await self._load_adapter(model)
        except FileNotFoundError as exc:
            raise OpenAIHTTPError(404, str(exc), type="not_found_error", param="model") from None
        except ValueError as exc:
            raise OpenAIHTTPError(400, str(exc), param="model") from None
        return dataclasses.replace(options, lora=loaded.adapter)

    async def _fetch_adapter(self, model_id: str) -> _LoadedAdapter:
        name = split_model_id(model_id)[1] or ""
        adapter = await asyncio.to_thread(self._fetcher.fetch, name)
        return _LoadedAdapter(adapter, self._fetcher)

    async def adapters(self) -> list[str]:
        """The adapters this replica holds now, least recently used first (for tests and status)."""
        from raylite.serve.multiplex import loaded_model_ids

        return list(loaded_model_ids(self))


class _LoadedAdapter:
    """The multiplexing cache's entry; evicting it removes the downloaded files."""

    def __init__(self, adapter: Adapter, fetcher: AdapterFetcher) -> None:
        self.adapter = adapter
        self._fetcher = fetcher

    def __del__(self) -> None:
        self._fetcher.forget(self.adapter)


def lora_server_class(max_adapters: int) -> type[LoraLLMServer]:
    """A LoraLLMServer whose multiplexed loader holds up to `max_adapters` adapters."""
    from raylite import serve

    class LLMServerWithLoRA(LoraLLMServer):
        @serve.multiplexed(max_num_models_per_replica=max_adapters)
        async def _load_adapter(self, model_id: str) -> _LoadedAdapter:
            return await self._fetch_adapter(model_id)

    LLMServerWithLoRA.__name__ = LLMServerWithLoRA.__qualname__ = "LLMServer"
    return LLMServerWithLoRA
