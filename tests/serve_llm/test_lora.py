"""Multi-LoRA on Serve LLM: two tiny adapters made here with peft, served from S3 (moto's server
on loopback) as `model="tiny:ADAPTER"`; each adapter's greedy output differs from the base
model's and equals vLLM's own with that adapter; a replica holds at most
max_num_adapters_per_replica adapters (the least recently used goes)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import httpx
import pytest

from tests.s3_server import s3_env, s3_server  # noqa: F401 - fixtures
from tests.serve_llm.conftest import llm_app, vllm_skip_reason

# find_spec, not importorskip: importing peft (transformers, torch) at collection cost ~45 s
pytestmark = [pytest.mark.timeout(1200),
              pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed"),
              pytest.mark.skipif(vllm_skip_reason() is not None, reason=str(vllm_skip_reason()))]

PROMPT = [1, 17, 42, 99, 7, 256]
MAX_TOKENS = 8
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_adapter(model: str, path: str, seed: int) -> str:
    """A rank-8 LoRA on the attention projections with random (non-zero) B, so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, init_lora_weights=False,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    peft_model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def adapters(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {name: make_adapter(tiny_model, str(root / name), seed) for name, seed in (("alpha", 1), ("beta", 2))}


def _upload(server, bucket: str, adapters: dict[str, str]) -> str:
    client = server.client()
    server.make_bucket(bucket)
    for name, path in adapters.items():
        for file in os.listdir(path):
            client.upload_file(os.path.join(path, file), bucket, f"loras/{name}/{file}")
    return f"s3://{bucket}/loras"


def _complete(base_url: str, model: str) -> httpx.Response:
    return httpx.post(f"{base_url}/completions", timeout=300, json={
        "model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})


@pytest.mark.slow  # a vLLM app with adapters and a reference engine: ~65 s
def test_adapters_from_s3_match_vllm_and_stay_within_the_limit(tiny_model, adapters, s3_env, monkeypatch):  # noqa: F811
    # a cluster of our own, even where `raylite start` left one running on this machine
    monkeypatch.setenv("RAYLITE_TEMP_DIR", tempfile.mkdtemp(prefix="rllora", dir="/tmp"))
    reference = subprocess.Popen(
        [sys.executable, "-m", "tests.serve_llm.lora_reference", tiny_model, json.dumps(PROMPT), str(MAX_TOKENS),
         *(f"{n}={p}" for n, p in adapters.items())], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    root = _upload(s3_env, "lora-bucket", adapters)
    config = {"model_loading_config": {"model_id": "tiny", "model_source": tiny_model},
              "engine_kwargs": {"max_model_len": 256, "enforce_eager": True, "dtype": "float32",
                                "max_lora_rank": 8},
              "lora_config": {"dynamic_lora_loading_path": root, "max_num_adapters_per_replica": 1}}
    try:
        with llm_app([config]) as base_url:
            from raylite import serve

            got = {"base": _complete(base_url, "tiny").json()["choices"][0]["text"]}
            handle = serve.get_deployment_handle("LLMServer:tiny", app_name="default")
            for name in adapters:
                reply = _complete(base_url, f"tiny:{name}")
                assert reply.status_code == 200, reply.text
                got[name] = reply.json()["choices"][0]["text"]
                # one adapter at a time on the replica: the other was evicted
                assert handle.adapters.remote().result(timeout_s=60) == [f"tiny:{name}"]
            missing = _complete(base_url, "tiny:nope")
            assert missing.status_code == 404 and "nope" in missing.text
        out, _ = reference.communicate(timeout=900)
    finally:
        if reference.poll() is None:
            reference.kill()
    want = json.loads(next(x for x in out.splitlines() if x.startswith("REFERENCE "))[len("REFERENCE "):])
    assert got == want
    assert got["alpha"] != got["base"] and got["beta"] != got["base"] and got["alpha"] != got["beta"]


def test_a_local_folder_of_adapters_is_read_in_place(adapters, tmp_path):
    from raylite.serve.llm._internal.lora import AdapterFetcher, split_model_id

    root = os.path.dirname(adapters["alpha"])
    fetcher = AdapterFetcher(root)
    one, two = fetcher.fetch("alpha"), fetcher.fetch("beta")
    assert one.path == adapters["alpha"] and one.int_id != two.int_id and one.int_id > 0
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        fetcher.fetch("nope")
    with pytest.raises(ValueError, match="sub-folder"):
        fetcher.fetch("../x")
    assert split_model_id("tiny:alpha") == ("tiny", "alpha") and split_model_id("tiny") == ("tiny", None)


def test_lora_config_without_a_path_is_refused_at_build():
    from raylite.serve.llm import build_openai_app

    with pytest.raises(ValueError, match="dynamic_lora_loading_path"):
        build_openai_app({"llm_configs": [{"model_loading_config": {"model_id": "m", "model_source": "/x"},
                                           "lora_config": {"max_num_adapters_per_replica": 2}}]})
