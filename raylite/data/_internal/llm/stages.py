"""The CPU stages of an LLM processor: chat template, tokenize, detokenize, HTTP requests.

Each is a callable class for `Dataset.map_batches(batch_format="pyarrow")`: built once per
Data actor (the tokenizer loads once), then called per batch of rows. Rows carry their other
columns through; a row whose engine call failed (`__inference_error__` set) passes the later
stages untouched, so one bad row never loses its batch.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pyarrow as pa

ERROR_COLUMN = "__inference_error__"


def rows_of(batch: pa.Table) -> list[dict[str, Any]]:
    return batch.to_pylist()


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def failed(row: dict[str, Any]) -> bool:
    return bool(row.get(ERROR_COLUMN))


class _TokenizerStage:
    def __init__(self, model: str, trust_remote_code: bool = False) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)


class ChatTemplateUDF(_TokenizerStage):
    """`messages` (OpenAI chat format) -> `prompt`, with the model's (or the given) template.
    The generation prompt is added when the last message is the user's; otherwise the last
    (assistant) message is continued, as Ray does."""

    def __init__(self, model: str, chat_template: str | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, trust_remote_code: bool = False) -> None:
        super().__init__(model, trust_remote_code)
        self.chat_template = chat_template
        self.kwargs = dict(chat_template_kwargs or {})
        if chat_template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {model!r} has no chat template: give one "
                             "(chat_template_stage={'chat_template': ...}) or send `prompt` rows "
                             "with chat_template_stage=False")

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = rows_of(batch)
        for row in rows:
            if "messages" not in row:
                raise ValueError("the chat template stage needs a `messages` column (OpenAI chat "
                                 f"messages); this row has {sorted(row)}. Build it in `preprocess`, or "
                                 "pass chat_template_stage=False and a `prompt` column.")
            messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
            add = bool(messages) and messages[-1].get("role") == "user"
            row["prompt"] = self.tokenizer.apply_chat_template(
                messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=add,
                continue_final_message=not add, **self.kwargs)
        return table_of(rows)


class TokenizeUDF(_TokenizerStage):
    """`prompt` -> `tokenized_prompt` (the token ids the engine takes as they are)."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = rows_of(batch)
        prompts = [row.get("prompt") for row in rows]
        if any(p is None for p in prompts):
            raise ValueError("the tokenize stage needs a `prompt` column (or `messages` with the chat "
                             "template stage on); build it in `preprocess`.")
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        for row, tokens in zip(rows, ids):
            row["tokenized_prompt"] = list(tokens)
        return table_of(rows)


class DetokenizeUDF(_TokenizerStage):
    """`generated_tokens` -> `generated_text` (rows whose engine call failed are left as they are)."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = rows_of(batch)
        todo = [row for row in rows if not failed(row) and row.get("generated_tokens") is not None]
        texts = self.tokenizer.batch_decode([row["generated_tokens"] for row in todo], skip_special_tokens=True)
        for row, text in zip(todo, texts):
            row["generated_text"] = text
        return table_of(rows)


class HttpRequestUDF:
    """POST each row's `payload` (JSON) to `url`; the reply's JSON goes into `http_response`.
    Retries 408/429/502/503/504 and connection errors up to `max_retries` times with
    exponential backoff; `qps` spaces the requests of a batch."""

    RETRYABLE_STATUS_CODES = (429, 408, 504, 502, 503)

    def __init__(self, url: str, headers: dict[str, Any] | None = None, qps: int | None = None,
                 max_retries: int = 0, base_retry_wait_time_in_s: float = 1.0,
                 session_factory: Any = None) -> None:
        self.url = url
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.qps = qps
        self.max_retries = max_retries
        self.base_wait_s = base_retry_wait_time_in_s
        self.session_factory = session_factory

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = rows_of(batch)
        for row in rows:
            if "payload" not in row:
                raise ValueError(f"the HTTP request stage needs a `payload` column; this row has {sorted(row)}")
        replies = asyncio.run(self._send_all([row["payload"] for row in rows]))
        for row, reply in zip(rows, replies):
            row["http_response"] = reply
        return table_of(rows)

    async def _send_all(self, payloads: list[Any]) -> list[Any]:
        import httpx

        factory = self.session_factory or (lambda: httpx.AsyncClient(timeout=httpx.Timeout(600.0)))
        async with factory() as client:
            started = time.monotonic()
            pending = []
            for i, payload in enumerate(payloads):
                if self.qps:
                    wait_s = (i + 1) / self.qps - (time.monotonic() - started)
                    if wait_s > 0:
                        await asyncio.sleep(wait_s)
                pending.append(asyncio.ensure_future(self._send(client, payload)))
            return list(await asyncio.gather(*pending))

    async def _send(self, client: Any, payload: Any) -> Any:
        import httpx

        body = json.dumps(payload, default=_jsonable)
        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                reply = await client.post(self.url, headers=self.headers, content=body)
                if reply.status_code not in self.RETRYABLE_STATUS_CODES:
                    reply.raise_for_status()
                    return reply.json()
                last = f"HTTP {reply.status_code}"
            except (httpx.TransportError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.max_retries:
                await asyncio.sleep(self.base_wait_s * 2 ** attempt)
        raise RuntimeError(f"POST {self.url} failed after {self.max_retries + 1} attempt(s) (max_retries="
                           f"{self.max_retries}); last error: {last}. Raise max_retries or check the server.")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")
