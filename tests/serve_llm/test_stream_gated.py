"""Serve LLM streams tokens as they are generated, proven without timing.

The engine is held after its first token until the test has received that token over HTTP:
if anything on the path (LLMServer, OpenAiIngress, the HTTP proxy) buffered the stream, the
first event could not arrive and the read would time out. A count of network reads, as an
earlier test did, depends on how fast the client reads on a loaded machine.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

import raylite
from tests.serve_llm.conftest import HIDE_VLLM, free_port

pytestmark = pytest.mark.timeout(600)
MODEL = "tiny"


def _gated_server_class():
    from raylite.serve.llm._internal.server import LLMServer

    class GatedLLMServer(LLMServer):
        """LLMServer whose engine stops after each request's first token until `gate` exists."""

        def __init__(self, llm_config, gate: str) -> None:
            super().__init__(llm_config)
            inner = self._engine.generate

            async def generate(ids, options, request_id):
                import asyncio

                first = True
                async for deltas in inner(ids, options, request_id):
                    yield deltas
                    while first and not os.path.exists(gate):
                        await asyncio.sleep(0.01)
                    first = False

            self._engine.generate = generate

    return GatedLLMServer


@pytest.fixture(scope="module")
def gated(tiny_model, tmp_path_factory):
    from raylite import serve
    from raylite.serve.llm import LLMConfig
    from raylite.serve.llm._internal.ingress import OpenAiIngress

    gate = str(tmp_path_factory.mktemp("gate") / "release")
    if raylite.is_initialized():
        raylite.shutdown()
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HIDE_VLLM, saved) if p)
    try:  # the transformers fallback: the streaming path above the engine is the same for vLLM
        raylite.init(num_cpus=2)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        config = LLMConfig(model_loading_config={"model_id": MODEL, "model_source": tiny_model},
                           engine_kwargs={"max_model_len": 256})
        server = serve.deployment(_gated_server_class()).options(
            name="LLMServer:tiny", ray_actor_options={"num_cpus": 0}).bind(config, gate)
        ingress = serve.deployment(OpenAiIngress).options(
            name="OpenAiIngress", ray_actor_options={"num_cpus": 0}).bind([server])
        serve.run(ingress)
        yield f"http://127.0.0.1:{port}/v1", gate
    finally:
        serve.shutdown()
        raylite.shutdown()


def test_first_token_arrives_while_the_engine_still_generates(gated):
    base_url, gate = gated
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{base_url}/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.iter_lines()
        first = next(line for line in lines if line)
        assert not os.path.exists(gate)  # the engine is still held after its first token
        assert json.loads(first.removeprefix("data: "))["object"] == "text_completion"
        open(gate, "w").close()
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["usage"]["completion_tokens"] == 24
