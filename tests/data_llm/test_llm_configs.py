"""raylite.data.llm's configs under Ray 2.60's names, fields and defaults (no engine runs here)."""

from __future__ import annotations

import pytest

from raylite.data import llm

# Ray 2.60's vLLMEngineProcessorConfig fields (ray.data.llm), read from /opt/rayvenv
RAY_VLLM_FIELDS = {
    "batch_size", "accelerator_type", "concurrency", "model_source", "runtime_env", "max_pending_requests",
    "max_concurrent_batches", "max_tasks_in_flight_per_actor", "should_continue_on_error",
    "chat_template_stage", "tokenize_stage", "detokenize_stage", "prepare_multimodal_stage",
    "engine_kwargs", "task_type", "log_engine_metrics", "dynamic_lora_loading_path", "placement_group_config",
    "apply_chat_template", "chat_template", "tokenize", "detokenize",
}
RAY_HTTP_FIELDS = {"batch_size", "accelerator_type", "concurrency", "url", "headers", "qps", "max_retries",
                   "base_retry_wait_time_in_s", "session_factory", "http_request_stage"}


def test_the_public_names_are_rays():
    for name in ("build_processor", "Processor", "ProcessorConfig", "vLLMEngineProcessorConfig",
                 "HttpRequestProcessorConfig", "ChatTemplateStageConfig", "TokenizerStageConfig",
                 "DetokenizeStageConfig", "HttpRequestStageConfig"):
        assert hasattr(llm, name), name
    assert llm.build_llm_processor is llm.build_processor  # the name of older Ray releases


def test_the_fields_cover_rays():
    fields = set(llm.vLLMEngineProcessorConfig.model_fields)
    assert RAY_VLLM_FIELDS <= fields
    assert RAY_HTTP_FIELDS <= set(llm.HttpRequestProcessorConfig.model_fields)
    c = llm.vLLMEngineProcessorConfig(model_source="m")
    assert (c.batch_size, c.concurrency, c.max_concurrent_batches, c.should_continue_on_error) == (32, 1, 8, False)
    assert llm.HttpRequestProcessorConfig(url="http://x").batch_size == 64


def test_concurrency_is_an_int_or_a_range():
    c = llm.vLLMEngineProcessorConfig(model_source="m", concurrency=3)
    assert c.get_concurrency() == {"min_size": 1, "max_size": 3}
    assert c.get_concurrency(autoscaling_enabled=False) == {"size": 3}
    assert llm.vLLMEngineProcessorConfig(model_source="m", concurrency=(2, 4)).get_concurrency() == \
        {"min_size": 2, "max_size": 4}
    for bad in (0, (3, 2), (0, 1)):
        with pytest.raises(ValueError, match="concurrency"):
            llm.vLLMEngineProcessorConfig(model_source="m", concurrency=bad)


def test_the_legacy_flags_map_onto_the_stage_configs():
    c = llm.vLLMEngineProcessorConfig(model_source="m", apply_chat_template=False, tokenize=False,
                                      detokenize=False)
    assert c.chat_template_stage == {"enabled": False}
    assert c.tokenize_stage == {"enabled": False} and c.detokenize_stage == {"enabled": False}
    c = llm.vLLMEngineProcessorConfig(model_source="m", chat_template="{{ x }}")
    assert c.chat_template_stage == {"enabled": True, "chat_template": "{{ x }}"}


def test_the_stages_follow_the_config(monkeypatch):
    import raylite

    monkeypatch.setattr(raylite, "cluster_resources", lambda: {"CPU": 4.0})
    p = llm.build_processor(llm.vLLMEngineProcessorConfig(
        model_source="m", chat_template_stage=False, detokenize_stage={"enabled": True, "batch_size": 7}))
    assert p.list_stage_names() == ["TokenizeStage", "vLLMEngineStage", "DetokenizeStage"]
    engine = p.get_stage_by_name("vLLMEngineStage")
    assert engine.map_batches_kwargs["max_concurrency"] == 8  # batches overlap in the engine
    assert engine.fn_constructor_kwargs["detokenize_in_engine"] is False  # the stage does it
    assert p.get_stage_by_name("DetokenizeStage").map_batches_kwargs["batch_size"] == 7
    with pytest.raises(ValueError, match="not found"):
        p.get_stage_by_name("Nope")


def test_what_is_not_supported_yet_says_so_at_build():
    for kw, match in (({"task_type": "embed"}, "generate"), ({"dynamic_lora_loading_path": "/l"}, "LoRA"),
                      ({"engine_kwargs": {"tensor_parallel_size": 2}}, "concurrency")):
        config = llm.vLLMEngineProcessorConfig(model_source="m", **kw)  # Ray's examples build these
        with pytest.raises(ValueError, match=match):
            llm.build_processor(config)
    with pytest.raises(ValueError, match="multimodal"):
        llm.vLLMEngineProcessorConfig(model_source="m", prepare_multimodal_stage=True)
    with pytest.raises(ValueError, match="unknown|Extra|extra"):
        llm.vLLMEngineProcessorConfig(model_source="m", batchsize=3)
