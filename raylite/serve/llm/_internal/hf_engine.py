"""The fallback engine on transformers, for machines where vLLM cannot be installed.

Dynamic batching: requests that arrive while a batch is decoding wait, and start together as
the next batch (left-padded, one KV cache, one forward pass per step for all of them). Each
step's tokens stream out per request at once. Embeddings are the mean of the last hidden
states, L2-normalized (sentence-transformers' default pooling), or sentence-transformers'
own model when the folder is one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from raylite.serve.llm._internal.engine_base import ChoiceDelta, Engine, SamplingOptions
from raylite.serve.llm._internal.tokenizer import Tokenizer


def is_causal_lm(config: Any) -> bool:
    """Whether a checkpoint's config describes a text-generating (causal) model, asked of
    transformers' own causal-LM class mapping rather than of class-name suffixes: GPT-2's
    `GPT2LMHeadModel` generates, `BertModel` embeds though BERT also has a causal variant."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal_classes: set[str] = set()
    for names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        causal_classes.update((names,) if isinstance(names, str) else names)
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures:
        return any(a in causal_classes or a.endswith("ForCausalLM") for a in architectures)
    return getattr(config, "model_type", None) in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


@dataclass
class _Request:
    request_id: str
    prompt: list[int]
    options: SamplingOptions
    out: asyncio.Queue
    cancelled: bool = False


@dataclass
class _Row:
    """One sequence (one choice of one request) inside a decoding batch."""

    request: _Request
    index: int
    generator: Any
    ids: list[int] = field(default_factory=list)
    sent_chars: int = 0
    finish_reason: str | None = None
    new_tokens: list[int] = field(default_factory=list)
    logprob_entries: list[dict[str, Any]] = field(default_factory=list)
    reported_finish: bool = False


class TransformersEngine(Engine):
    name = "transformers"

    def __init__(self, llm_config: Any) -> None:
        self._config = llm_config
        kwargs = llm_config.engine_kwargs
        self._max_num_seqs = int(kwargs.get("max_num_seqs", 16))
        self._max_model_len_arg = kwargs.get("max_model_len")
        self._pending: list[_Request] = []
        self._wakeup: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._model: Any = None
        self._st_model: Any = None
        self.tokenizer: Tokenizer | None = None
        self._max_model_len = 0
        self._tasks = (True, True)

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._load)
        self._wakeup = asyncio.Event()
        self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    def _load(self) -> None:
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

        loading = self._config.model_loading_config
        source = loading.source()
        trust = bool(self._config.engine_kwargs.get("trust_remote_code", False))
        self.tokenizer = Tokenizer(loading.tokenizer_source or source, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust)
        causal = is_causal_lm(config)
        cls = AutoModelForCausalLM if causal else AutoModel
        self._model = cls.from_pretrained(source, trust_remote_code=trust,
                                          dtype=torch.float32).eval()
        if not causal and os.path.exists(os.path.join(source, "modules.json")):
            try:
                from sentence_transformers import SentenceTransformer

                self._st_model = SentenceTransformer(source, device="cpu")
            except ImportError:
                self._st_model = None
        self._tasks = (causal, True)
        limit = self._max_model_len_arg or getattr(config, "max_position_embeddings", None) or 2048
        self._max_model_len = int(limit)

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def supports(self) -> tuple[bool, bool]:
        return self._tasks

    async def generate(self, prompt_token_ids: list[int], options: SamplingOptions,
                       request_id: str) -> AsyncIterator[list[ChoiceDelta]]:
        request = _Request(request_id, list(prompt_token_ids), options, asyncio.Queue())
        self._pending.append(request)
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            while True:
                item = await request.out.get()
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    return
                yield item
        finally:
            request.cancelled = True

    async def _batch_loop(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, rows = [], 0
                while self._pending and (not batch or rows + self._pending[0].options.n
                                         <= self._max_num_seqs):
                    req = self._pending.pop(0)
                    batch.append(req)
                    rows += req.options.n
                try:
                    await self._decode(batch, loop)
                except Exception as exc:  # a bad batch fails its requests, not the engine
                    for req in batch:
                        req.out.put_nowait(exc)

    async def _decode(self, batch: list[_Request], loop: asyncio.AbstractEventLoop) -> None:
        import torch

        rows = []
        for req in batch:
            for i in range(req.options.n):
                gen = None
                if req.options.seed is not None:
                    gen = torch.Generator().manual_seed(req.options.seed + i)
                rows.append(_Row(req, i, gen))
        pad = self.tokenizer.pad_token_id
        width = max(len(r.request.prompt) for r in rows)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            n = len(r.request.prompt)
            input_ids[b, width - n:] = torch.tensor(r.request.prompt)
            mask[b, width - n:] = 1
        state = {"past": None, "input_ids": input_ids, "mask": mask}
        max_steps = max(r.request.options.max_tokens for r in rows)
        for _ in range(max_steps):
            logits = await loop.run_in_executor(None, self._forward, state)
            next_ids = self._sample(rows, logits)
            for b, r in enumerate(rows):
                if r.finish_reason is None and not r.request.cancelled:
                    self._advance(r, int(next_ids[b]), logits[b])
            self._flush(batch, rows)
            if all(r.reported_finish or r.request.cancelled for r in rows):
                break
            state["input_ids"] = next_ids.view(-1, 1)
            state["mask"] = torch.cat([state["mask"], torch.ones((len(rows), 1),
                                                                 dtype=torch.long)], dim=1)
        for req in batch:
            req.out.put_nowait(None)

    def _forward(self, state: dict[str, Any]) -> Any:
        import torch

        mask = state["mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -state["input_ids"].shape[1]:]
        with torch.inference_mode():
            out = self._model(input_ids=state["input_ids"], attention_mask=mask,
                              position_ids=positions, past_key_values=state["past"],
                              use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[:, -1, :].float()

    def _sample(self, rows: list[_Row], logits: Any) -> Any:
        import torch

        chosen = torch.empty(len(rows), dtype=torch.long)
        for b, r in enumerate(rows):
            opt = r.request.options
            row = logits[b].clone()
            if r.ids and (opt.presence_penalty or opt.frequency_penalty):
                seen = torch.tensor(r.ids)
                counts = torch.bincount(seen, minlength=row.shape[0]).float()
                row -= opt.frequency_penalty * counts + opt.presence_penalty * (counts > 0).float()
            if opt.temperature <= 0:
                chosen[b] = int(torch.argmax(row))
                continue
            probs = torch.softmax(row / opt.temperature, dim=-1)
            if opt.top_p < 1.0:
                sorted_p, order = torch.sort(probs, descending=True)
                keep = sorted_p.cumsum(0) - sorted_p < opt.top_p
                probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            chosen[b] = int(torch.multinomial(probs, 1, generator=r.generator))
        return chosen

    def _advance(self, r: _Row, token_id: int, logits: Any) -> None:
        opt = r.request.options
        r.ids.append(token_id)
        r.new_tokens.append(token_id)
        if opt.logprobs is not None:
            import torch

            logp = torch.log_softmax(logits, dim=-1)
            top = torch.topk(logp, max(opt.logprobs, 1))
            r.logprob_entries.append({
                "token_id": token_id, "token": self.tokenizer.token_text(token_id),
                "logprob": float(logp[token_id]),
                "top": [{"token_id": int(t), "token": self.tokenizer.token_text(int(t)),
                         "logprob": float(v)} for v, t in zip(top.values, top.indices)][:opt.logprobs],
            })
        if token_id == self.tokenizer.eos_token_id:
            r.ids.pop()
            r.new_tokens.pop()
            r.finish_reason = "stop"
        elif len(r.ids) >= opt.max_tokens:
            r.finish_reason = "length"

    def _flush(self, batch: list[_Request], rows: list[_Row]) -> None:
        """Send each request the text its rows produced this step (stop strings cut here)."""
        per_request: dict[str, list[ChoiceDelta]] = {}
        for r in rows:
            if r.request.cancelled or r.reported_finish:
                continue
            opt = r.request.options
            text = self.tokenizer.decode(r.ids)
            stop_at = min((i for i in (text.find(s) for s in opt.stop) if i >= 0), default=-1)
            if stop_at >= 0:
                text, r.finish_reason = text[:stop_at], "stop"
            if r.finish_reason is None:
                hold = max((len(s) - 1 for s in opt.stop), default=0)
                safe = len(text) - hold
                while safe > r.sent_chars and text[safe - 1] == "\ufffd":
                    safe -= 1
                text = text[:max(safe, r.sent_chars)]
            delta = text[r.sent_chars:]
            r.sent_chars = len(text)
            if delta or r.finish_reason is not None or r.new_tokens:
                per_request.setdefault(r.request.request_id, []).append(ChoiceDelta(
                    index=r.index, text=delta, token_ids=r.new_tokens,
                    logprobs=r.logprob_entries, finish_reason=r.finish_reason))
            r.new_tokens, r.logprob_entries = [], []
            r.reported_finish = r.finish_reason is not None
        for req in batch:
            if req.request_id in per_request:
                req.out.put_nowait(per_request[req.request_id])

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(None, self._embed, inputs)

    def _embed(self, inputs: list[list[int]]) -> list[list[float]]:
        import torch

        if self._st_model is not None:
            texts = [self.tokenizer.hf.decode(ids, skip_special_tokens=True) for ids in inputs]
            return self._st_model.encode(texts, normalize_embeddings=True).tolist()
        width = max(len(ids) for ids in inputs)
        ids_t = torch.full((len(inputs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(inputs), width), dtype=torch.long)
        for b, ids in enumerate(inputs):
            ids_t[b, :len(ids)] = torch.tensor(ids)
            mask[b, :len(ids)] = 1
        with torch.inference_mode():
            out = self._model(input_ids=ids_t, attention_mask=mask, output_hidden_states=True)
        hidden = out.hidden_states[-1] if getattr(out, "hidden_states", None) else out[0]
        summed = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return torch.nn.functional.normalize(summed, dim=-1).tolist()

    async def check_health(self) -> None:
        if self._loop_task is not None and self._loop_task.done():
            raise RuntimeError("the transformers engine's batching loop stopped: "
                               f"{self._loop_task.exception()!r}")
