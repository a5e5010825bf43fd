"""OpenAI response bodies built from engine deltas: whole responses and server-sent events."""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from typing import Any

from raylite.serve.llm._internal.engine_base import ChoiceDelta

DONE = "data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sse(obj: dict[str, Any]) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class ChoiceAccumulator:
    """Collects the deltas of each choice into the final message, logprobs and finish reason."""

    def __init__(self, n: int) -> None:
        self.text = ["" for _ in range(n)]
        self.tokens = [0 for _ in range(n)]
        self.logprobs: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        self.finish: list[str | None] = [None for _ in range(n)]

    def add(self, deltas: list[ChoiceDelta], offset: int = 0) -> None:
        for d in deltas:
            i = offset + d.index
            self.text[i] += d.text
            self.tokens[i] += len(d.token_ids)
            self.logprobs[i].extend(d.logprobs)
            if d.finish_reason is not None:
                self.finish[i] = d.finish_reason

    @property
    def completion_tokens(self) -> int:
        return sum(self.tokens)


def chat_logprobs(entries: list[dict[str, Any]], want: bool) -> dict[str, Any] | None:
    if not want:
        return None
    return {"content": [
        {"token": e["token"], "logprob": e["logprob"], "bytes": list(e["token"].encode()),
         "top_logprobs": [{"token": t["token"], "logprob": t["logprob"],
                           "bytes": list(t["token"].encode())} for t in e["top"]]}
        for e in entries]}


def completion_logprobs(entries: list[dict[str, Any]], want: int | None,
                        offset: int = 0) -> dict[str, Any] | None:
    if want is None:
        return None
    offsets, pos = [], offset
    for e in entries:
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top"]} for e in entries],
            "text_offset": offsets}


def chat_response(model: str, acc: ChoiceAccumulator, prompt_tokens: int,
                  want_logprobs: bool) -> dict[str, Any]:
    return {
        "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": acc.text[i]},
                     "logprobs": chat_logprobs(acc.logprobs[i], want_logprobs),
                     "finish_reason": acc.finish[i] or "stop"} for i in range(len(acc.text))],
        "usage": usage(prompt_tokens, acc.completion_tokens),
    }


def completion_response(model: str, acc: ChoiceAccumulator, prompt_tokens: int,
                        want_logprobs: int | None, echo_prompts: list[str] | None) -> dict[str, Any]:
    choices = []
    for i in range(len(acc.text)):
        prefix = echo_prompts[i] if echo_prompts else ""
        choices.append({"index": i, "text": prefix + acc.text[i],
                        "logprobs": completion_logprobs(acc.logprobs[i], want_logprobs, len(prefix)),
                        "finish_reason": acc.finish[i] or "stop"})
    return {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(prompt_tokens, acc.completion_tokens)}


def embedding_response(model: str, vectors: list[list[float]], prompt_tokens: int,
                       encoding_format: str, dimensions: int | None) -> dict[str, Any]:
    data = []
    for i, vec in enumerate(vectors):
        if dimensions is not None:
            vec = vec[:dimensions]
        value: Any = vec
        if encoding_format == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
