"""Slower Serve LLM cases: several models with autoscaling, `serve run serve_config:app`,
vLLM's pooling runner for /v1/embeddings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from tests.serve_llm.conftest import free_port, llm_app, vllm_skip_reason, wait_until

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_models_routed_by_model_and_autoscaling_1_to_2(tiny_model):
    from raylite import serve

    scaled = {"model_loading_config": {"model_id": "a", "model_source": tiny_model},
              "llm_engine": "transformers", "engine_kwargs": {"max_model_len": 512},
              "deployment_config": {"autoscaling_config": {
                  "min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 1,
                  "upscale_delay_s": 0.5, "downscale_delay_s": 600, "metrics_interval_s": 0.5,
                  "look_back_period_s": 1}}}
    other = {"model_loading_config": {"model_id": "b", "model_source": tiny_model},
             "llm_engine": "transformers", "engine_kwargs": {"max_model_len": 128}}
    with llm_app([scaled, other], num_cpus=6) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=300)
        assert sorted(m.id for m in client.models.list()) == ["a", "b"]
        assert client.models.retrieve("b").model_extra["max_model_len"] == 128
        r = client.completions.create(model="b", prompt="hi", max_tokens=3)
        assert r.model == "b" and r.usage.completion_tokens == 3

        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                client.completions.create(model="a", prompt="Once upon a time", max_tokens=200)

        threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            def running() -> int:
                dep = serve.status().applications["default"].deployments["LLMServer:a"]
                return dep.replica_states.get("RUNNING", 0)

            wait_until(lambda: running() == 2, 600, "LLMServer:a to scale to 2 replicas")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=300)


SERVE_CONFIG = '''
from raylite.serve.llm import LLMConfig, build_openai_app

llm_config = LLMConfig(
    model_loading_config=dict(
        model_id="my-llama",
        model_source=MODEL_PATH,
    ),
    deployment_config=dict(
        autoscaling_config=dict(
            min_replicas=1,
            max_replicas=4,
        )
    ),
    engine_kwargs=dict(
        max_model_len=512,
    ),
)

app = build_openai_app({"llm_configs": [llm_config]})
'''


def test_serve_run_serve_config_app(tiny_model, tmp_path):
    """The seed's `serve run serve_config:app`, then the seed's openai client call."""
    help_out = subprocess.run([sys.executable, "-m", "raylite.cli", "serve", "--help"],
                              capture_output=True, text=True, timeout=120)
    if help_out.returncode != 0:
        pytest.skip("`raylite serve` CLI is not in this tree yet")
    (tmp_path / "serve_config.py").write_text(
        SERVE_CONFIG.replace("MODEL_PATH", repr(tiny_model)))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT]),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "raylite.cli", "serve", "run",
                             "serve_config:app", "--port", str(port), "--address", "local"], cwd=tmp_path, env=env,
                            start_new_session=True)
    try:
        def answered():
            if proc.poll() is not None:
                raise AssertionError(f"serve run exited with {proc.returncode}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answered, 600, "serve run to answer")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-needed")
        response = client.chat.completions.create(
            model="my-llama",
            messages=[{"role": "user", "content": "Explain gradient checkpointing in 2 sentences."}],
            max_tokens=16)
        assert response.choices[0].message.content
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.skipif(vllm_skip_reason() is not None, reason=str(vllm_skip_reason()))
def test_vllm_pooling_runner_embeddings(tiny_model):
    cfg = {"model_loading_config": {"model_id": "embed", "model_source": tiny_model},
           "engine_kwargs": {"max_model_len": 256, "enforce_eager": True, "dtype": "float32", "runner": "pooling",
                             "convert": "embed"}}
    with llm_app([cfg]) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=300)
        out = client.embeddings.create(model="embed", input=["hello world", "a fox"])
        assert [d.index for d in out.data] == [0, 1]
        vec = out.data[0].embedding
        assert len(vec) == 128 and abs(sum(x * x for x in vec) - 1.0) < 1e-2
        with pytest.raises(openai.BadRequestError, match="embedding model"):
            client.completions.create(model="embed", prompt="x", max_tokens=2)
