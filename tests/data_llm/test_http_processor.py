"""HttpRequestProcessorConfig against raylite's own Serve LLM app (its OpenAI API; the app runs
its transformers engine here, which starts in seconds): each row's `payload` is posted, the
reply lands in `http_response`, and the replies are the ones the app gives a direct request."""

from __future__ import annotations

import httpx
import pytest

import raylite
from tests.serve_llm.conftest import llm_app

pytestmark = pytest.mark.timeout(600)


def test_rows_post_their_payload_to_the_serve_llm_app(tiny_model):
    from raylite.data.llm import HttpRequestProcessorConfig, build_processor

    config = {"model_loading_config": {"model_id": "tiny", "model_source": tiny_model},
              "engine_kwargs": {"max_model_len": 256}}
    with llm_app([config], hide_vllm=True) as base_url:
        url = f"{base_url}/completions"
        processor = build_processor(
            HttpRequestProcessorConfig(url=url, headers={"Authorization": "Bearer not-needed"}, qps=20,
                                       batch_size=3, concurrency=1),
            preprocess=lambda row: {"id": row["id"], "payload": {
                "model": "tiny", "prompt": f"Hello number {row['id']}", "max_tokens": 3, "temperature": 0}},
            postprocess=lambda row: {"id": row["id"], "text": row["http_response"]["choices"][0]["text"],
                                     "tokens": row["http_response"]["usage"]["completion_tokens"]})
        rows = sorted(processor(raylite.data.from_items([{"id": i} for i in range(5)])).take_all(),
                      key=lambda r: r["id"])
        direct = httpx.post(url, timeout=120, json={"model": "tiny", "prompt": "Hello number 2",
                                                    "max_tokens": 3, "temperature": 0}).json()
    assert [r["id"] for r in rows] == list(range(5))
    assert all(r["tokens"] == 3 for r in rows)
    assert rows[2]["text"] == direct["choices"][0]["text"]


def test_a_server_that_keeps_failing_names_the_retries():
    from raylite.data._internal.llm.stages import HttpRequestUDF

    udf = HttpRequestUDF("http://127.0.0.1:9/v1/completions", max_retries=1, base_retry_wait_time_in_s=0.01)
    import pyarrow as pa

    with pytest.raises(RuntimeError, match="after 2 attempt"):
        udf(pa.Table.from_pylist([{"payload": {"prompt": "x"}}]))
