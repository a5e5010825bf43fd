"""OpenAiIngress: the HTTP front of an LLM app, routing OpenAI requests by `model`.

Imports no engine (only starlette and pydantic), so it runs on any node. It validates each
body, picks the LLMServer deployment serving the requested model, and relays its answer:
JSON, or server-sent events passed through chunk by chunk as the model produces them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from raylite.serve.llm._internal.lora import split_model_id
from raylite.serve.llm.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    OpenAIHTTPError,
    from_validation_error,
    model_not_found,
)

ERROR_KEY = "__openai_error__"  # the same marker as LLMServer's (kept apart: no engine import)
_ROUTES = {
    ("POST", "/v1/chat/completions"): ("chat", ChatCompletionRequest),
    ("POST", "/v1/completions"): ("completions", CompletionRequest),
    ("POST", "/v1/embeddings"): ("embeddings", EmbeddingRequest),
}


class OpenAiIngress:
    """Ray's `ray.serve.llm.ingress.OpenAiIngress`: one per app, in front of every model."""

    def __init__(self, llm_deployments: list[Any]) -> None:
        self._handles = list(llm_deployments)
        self._models: dict[str, tuple[Any, dict[str, Any]]] | None = None
        self._lock: asyncio.Lock | None = None

    async def _model_table(self) -> dict[str, tuple[Any, dict[str, Any]]]:
        if self._models is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._models is None:
                    infos = await asyncio.gather(*(h.model_info.remote() for h in self._handles))
                    self._models = {info["id"]: (h, info) for h, info in zip(self._handles, infos)}
        return self._models

    async def __call__(self, request: Request) -> Response:
        path = _api_path(request)
        try:
            if request.method == "GET" and path in ("/v1/models", "/models"):
                return JSONResponse(await self.models())
            if request.method == "GET" and path.startswith("/v1/models/"):
                return JSONResponse(await self.model(path[len("/v1/models/"):]))
            if request.method == "GET" and path in ("/health", "/-/healthz", "/v1/health"):
                return Response("ok")
            route = _ROUTES.get((request.method, path))
            if route is None:
                raise OpenAIHTTPError(404, f"{request.method} {path} is not an OpenAI API route "
                                           "served here", type="not_found_error")
            return await self._relay(request, *route)
        except OpenAIHTTPError as exc:
            return JSONResponse(exc.body(), status_code=exc.status_code)

    async def models(self) -> dict[str, Any]:
        table = await self._model_table()
        return {"object": "list", "data": [_model_card(info) for _, info in table.values()]}

    async def model(self, model_id: str) -> dict[str, Any]:
        table = await self._model_table()
        if model_id not in table:
            raise model_not_found(model_id)
        return _model_card(table[model_id][1])

    async def _relay(self, request: Request, method: str, schema: type) -> Response:
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise OpenAIHTTPError(400, "the request body is not valid JSON")
        if not isinstance(raw, dict):
            raise OpenAIHTTPError(400, "the request body must be a JSON object")
        try:
            body = schema.model_validate(raw)
        except ValidationError as exc:
            raise from_validation_error(exc)
        table = await self._model_table()
        base, adapter = split_model_id(body.model)
        if body.model in table:
            handle = table[body.model][0]
        elif adapter is not None and base in table and table[base][1].get("lora"):
            # Serve's multiplexing: requests for one adapter prefer the replicas holding it
            handle = table[base][0].options(multiplexed_model_id=body.model)
        else:
            raise model_not_found(body.model)
        payload = body.model_dump(exclude_none=True)
        if getattr(body, "stream", False):
            gen = getattr(handle.options(stream=True), method + "_stream").remote(payload)
            return await _stream(gen)
        result = await getattr(handle, method).remote(payload)
        if isinstance(result, dict) and ERROR_KEY in result:
            return JSONResponse(result["body"], status_code=result[ERROR_KEY])
        return JSONResponse(result)


async def _stream(gen: Any) -> Response:
    """Relay an LLMServer stream; an error before the first chunk is a plain error response."""
    iterator = gen.__aiter__()
    try:
        first = await iterator.__anext__()
    except StopAsyncIteration:
        first = None
    if isinstance(first, dict) and ERROR_KEY in first:
        return JSONResponse(first["body"], status_code=first[ERROR_KEY])

    async def body() -> AsyncIterator[str]:
        if first is not None:
            yield first
        async for chunk in iterator:
            yield chunk

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _api_path(request: Request) -> str:
    path = request.url.path
    idx = path.find("/v1/")
    if idx > 0:
        return path[idx:]
    root = request.scope.get("root_path") or ""
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path.rstrip("/") or "/"


def _model_card(info: dict[str, Any]) -> dict[str, Any]:
    return {"id": info["id"], "object": "model", "created": info.get("created", int(time.time())),
            "owned_by": "raylite", "max_model_len": info.get("max_model_len"),
            "engine": info.get("engine")}
