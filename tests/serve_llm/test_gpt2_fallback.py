"""A GPT-2 checkpoint (GPT2LMHeadModel) serves chat through the transformers fallback engine."""

from __future__ import annotations

import httpx
import pytest

from tests.serve_llm.conftest import llm_app

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> str:
    pytest.importorskip("transformers")
    from tests.serve_llm.tiny_model import build_tiny_gpt2

    return build_tiny_gpt2(str(tmp_path_factory.mktemp("tiny-gpt2")))


def test_gpt2_serves_chat_on_the_fallback_engine(tiny_gpt2):
    config = {"model_loading_config": {"model_id": "gpt2-tiny", "model_source": tiny_gpt2},
              "llm_engine": "vLLM", "engine_kwargs": {"max_model_len": 256}}
    with llm_app([config], hide_vllm=True) as base_url:
        body = {"model": "gpt2-tiny", "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hello world!"}]}
        reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        out = reply.json()
        assert out["choices"][0]["message"]["role"] == "assistant"
        assert out["usage"]["completion_tokens"] >= 1
