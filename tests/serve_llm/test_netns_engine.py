"""One vLLM engine over two network-namespace hosts whose host names do not resolve.

On raylite's loopback clusters every rank's own guess at its address (the host name) works; on
real hosts (containers, many clouds, the netns hosts here) it does not resolve, gloo falls back
to 127.0.0.1 and the ranks refuse each other. The engine's ranks must use the interface holding
their node's cluster IP. Each host runs one raylite node (1 CPU); the replica's TP=2 engine has a
rank on each; its greedy tokens must equal one process's.
"""

from __future__ import annotations

import pytest

from tests.cluster import netns_cluster as N
from tests.serve_llm.conftest import vllm_skip_reason
from tests.serve_llm.test_multinode import MAX_TOKENS, PROMPT, reference  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(vllm_skip_reason() is not None, reason=str(vllm_skip_reason())),
              pytest.mark.skipif(not N.available(), reason="needs root and network namespaces")]

DRIVER = """
import json, os, socket
import httpx
import raylite as ray
from raylite import serve
from raylite.serve.llm import build_openai_app
ray.init()
serve.start(http_options={{"host": "127.0.0.1", "port": 8011, "location": "HeadOnly"}})
config = {{"model_loading_config": {{"model_id": "tiny", "model_source": {model!r}}},
          "engine_kwargs": {{"max_model_len": 256, "enforce_eager": True, "dtype": "float32",
                            "max_num_seqs": 4, {parallel}: 2}}}}
serve.run(build_openai_app({{"llm_configs": [config],
                            "ingress_deployment_config": {{"ray_actor_options": {{"num_cpus": 0}}}}}}))
reply = httpx.post("http://127.0.0.1:8011/v1/completions", timeout=300, json={{
    "model": "tiny", "prompt": {prompt!r}, "max_tokens": {max_tokens}, "temperature": 0}})
handle = serve.get_deployment_handle("LLMServer:tiny", app_name="default")
procs = handle.engine_processes.remote().result(timeout_s=60)
try:
    socket.gethostbyname(socket.gethostname())
    resolves = True
except OSError:
    resolves = False
print(json.dumps({{"status": reply.status_code, "body": reply.json() if reply.status_code == 200 else reply.text,
                  "nodes": len(procs), "hostname_resolves": resolves}}), flush=True)
serve.shutdown()
"""


@pytest.mark.parametrize("parallel", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_one_engine_over_two_hosts_whose_names_do_not_resolve(tiny_model, reference, parallel):  # noqa: F811
    with N.NetnsCluster(2, prefix="rlle") as c:
        out = c.driver(1, DRIVER.format(model=tiny_model, parallel=repr(parallel), prompt=PROMPT,
                                        max_tokens=MAX_TOKENS), timeout_s=800)
    assert out["hostname_resolves"] is False  # the situation this test is about
    assert out["status"] == 200, out["body"]
    assert out["nodes"] == 2  # a rank of the engine on each host
    want = reference()
    assert out["body"]["choices"][0]["text"] == want["text"]
    assert out["body"]["usage"]["completion_tokens"] == len(want["token_ids"])
