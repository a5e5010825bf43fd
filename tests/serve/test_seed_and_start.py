"""The seed document's Serve sample (T.5.5) with only imports changed, `num_gpus` removed and
vLLM replaced by a local stand-in; serve.run(host=, port=); a port already in use."""

import os
import socket

import httpx
import pytest

import raylite
from tests.serve.conftest import free_port

FAKE_VLLM = os.path.join(os.path.dirname(__file__), "fake_vllm")


@pytest.fixture(scope="module")
def fresh_cluster():
    if raylite.is_initialized():
        raylite.shutdown()
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = FAKE_VLLM + (os.pathsep + old if old else "")
    raylite.init(num_cpus=8)
    yield
    from raylite import serve

    serve.shutdown()
    raylite.shutdown()
    os.environ["PYTHONPATH"] = old


def test_port_in_use_is_a_clear_error(fresh_cluster):
    from raylite import serve

    serve.shutdown()  # the module's cluster may already run Serve (the seed test's port)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError) as info:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
    msg = str(info.value)
    assert str(port) in msg and "already in use" in msg and "port" in msg and "another port" in msg
    assert serve.status().applications == {}  # nothing half-started is left behind


def test_seed_rag_pipeline(fresh_cluster):
    # ---- seed 003, T.5.5, imports changed and num_gpus removed ----
    from raylite import serve
    from raylite.serve.handle import DeploymentHandle

    @serve.deployment(
        num_replicas=2,
        ray_actor_options={},
    )
    class LLMDeployment:
        def __init__(self, model_name: str):
            from vllm import LLM, SamplingParams
            self.llm = LLM(model=model_name, gpu_memory_utilization=0.85)
            self.default_params = SamplingParams(
                temperature=0.7, max_tokens=512
            )

        async def generate(self, prompt: str) -> str:
            outputs = self.llm.generate([prompt], self.default_params)
            return outputs[0].outputs[0].text

    @serve.deployment(num_replicas=1)
    class RAGPipeline:
        def __init__(self, llm_handle: DeploymentHandle):
            self.llm = llm_handle
            # Initialize retriever, reranker, etc.

        async def __call__(self, request):
            query = request.query_params["q"]
            # Step 1: Retrieve relevant documents (simplified)
            context = "Retrieved context would go here..."
            # Step 2: Generate response using the LLM
            prompt = f"Context: {context}\n\nQuestion: {query}\n\nAnswer:"
            response = await self.llm.generate.remote(prompt)
            return {"answer": response}

    # Bind deployments and start serving
    llm = LLMDeployment.bind(model_name="meta-llama/Llama-3.1-8B-Instruct")
    app = RAGPipeline.bind(llm_handle=llm)
    port = free_port()
    serve.run(app, host="0.0.0.0", port=port)
    # ---- end of the seed's code ----
    r = httpx.get(f"http://127.0.0.1:{port}/", params={"q": "what is Ray Serve?"}, timeout=30)
    assert r.status_code == 200
    assert r.json() == {"answer": "[meta-llama/Llama-3.1-8B-Instruct] answer to: Question: what is Ray Serve?"}
    st = serve.status().applications["default"]
    assert st.status == "RUNNING"
    assert st.deployments["LLMDeployment"].replica_states == {"RUNNING": 2}


def test_proxy_location_disabled_serves_handles_only(fresh_cluster):
    from raylite import serve

    serve.shutdown()
    serve.start(proxy_location="Disabled", http_options={"port": free_port()})

    @serve.deployment
    def ping(x: int = 0) -> str:
        return f"pong {x}"

    handle = serve.run(ping.bind(), name="quiet", route_prefix=None)
    assert handle.remote(3).result(timeout_s=20) == "pong 3"
    assert serve.status().proxies == {}
    serve.shutdown()
