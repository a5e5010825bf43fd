"""One model across nodes: an LLMConfig whose replica's placement group spans two real node
daemons (loopback, one CPU each) runs ONE vLLM engine over both (vLLM's own multi-node mode:
rank 0 in the replica, headless workers in actors on the other node).

The greedy tokens must equal one process's; a process of the engine must run on each node;
losing the other node must take the replica down and either bring it back elsewhere or say
why it cannot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.serve_llm.conftest import free_port, vllm_skip_reason, wait_until

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(vllm_skip_reason() is not None, reason=str(vllm_skip_reason()))]

PROMPT = [1, 17, 42, 99, 7, 256]
MAX_TOKENS = 12
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(model: str, **parallel: int) -> dict:
    return {"model_loading_config": {"model_id": "tiny", "model_source": model},
            "engine_kwargs": {"max_model_len": 256, "enforce_eager": True, "dtype": "float32",
                              "max_num_seqs": 4, **parallel},
            "deployment_config": {"health_check_period_s": 2, "health_check_timeout_s": 30}}


@pytest.fixture(scope="module")
def reference(tiny_model):
    """The tokens of one vLLM engine in one process (started now, read when first needed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serve_llm.one_process_engine", tiny_model, json.dumps(PROMPT),
         str(MAX_TOKENS)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    result: dict = {}

    def get() -> dict:
        if not result:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, "the one-process reference engine failed"
            line = next(x for x in out.splitlines() if x.startswith("REFERENCE "))
            result.update(json.loads(line[len("REFERENCE "):]))
        return result

    yield get
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture
def two_nodes():
    from raylite.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    other = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cluster.connect()
    try:
        yield cluster, other
    finally:
        from raylite import serve

        try:
            serve.shutdown()
        finally:
            cluster.shutdown()


def _deploy(config: dict) -> str:
    from raylite import serve
    from raylite.serve.llm import build_openai_app

    port = free_port()
    # both nodes share this machine's ports: one proxy, on the head
    serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"})
    # the ingress takes no CPU, so the two 1-CPU bundles are all the cluster's CPUs
    serve.run(build_openai_app({"llm_configs": [config],
                                "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}}))
    return f"http://127.0.0.1:{port}/v1"


def _complete(base_url: str) -> dict:
    import httpx

    reply = httpx.post(f"{base_url}/completions", timeout=300, json={
        "model": "tiny", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _engine_processes() -> dict[str, list[int]]:
    from raylite import serve

    handle = serve.get_deployment_handle("LLMServer:tiny", app_name="default")
    return handle.engine_processes.remote().result(timeout_s=60)


def _assert_same_tokens(body: dict, reference: dict) -> None:
    assert body["choices"][0]["text"] == reference["text"]
    assert body["usage"]["completion_tokens"] == len(reference["token_ids"])


def _assert_engine_on_both(cluster, other) -> dict[str, list[int]]:
    procs = _engine_processes()
    head = cluster.head_node
    assert set(procs) == {head.node_id, other.node_id}
    for node in (head, other):
        # more than the one actor/replica process: vLLM's own processes run there too
        assert len(procs[node.node_id]) >= 2, procs
        assert set(procs[node.node_id]) <= set(node.processes()), (node.node_id, procs)
    return procs


@pytest.mark.slow  # two vLLM engines (TP=2 over two nodes) and a reference run: ~100 s
def test_tensor_parallel_across_two_nodes(two_nodes, tiny_model, reference):
    cluster, other = two_nodes
    base_url = _deploy(_config(tiny_model, tensor_parallel_size=2))
    _assert_same_tokens(_complete(base_url), reference())
    procs = _assert_engine_on_both(cluster, other)
    # deleting the app takes the engine's processes down on both nodes
    from raylite import serve

    serve.delete("default")
    every = [p for pids in procs.values() for p in pids]
    wait_until(lambda: not any(_alive(p) for p in every), 120, "the engine's processes to exit")


@pytest.mark.slow
def test_pipeline_parallel_across_two_nodes(two_nodes, tiny_model, reference):
    cluster, other = two_nodes
    base_url = _deploy(_config(tiny_model, pipeline_parallel_size=2))
    _assert_same_tokens(_complete(base_url), reference())
    _assert_engine_on_both(cluster, other)


@pytest.mark.slow
def test_losing_the_other_node_restarts_the_replica_elsewhere(two_nodes, tiny_model, reference):
    cluster, other = two_nodes
    base_url = _deploy(_config(tiny_model, tensor_parallel_size=2))
    before = _assert_engine_on_both(cluster, other)
    spare = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cluster.remove_node(other, allow_graceful=False)

    def moved() -> dict | None:
        try:
            procs = _engine_processes()
        except Exception:  # noqa: BLE001 - the replica is being replaced
            return None
        return procs if spare.node_id in procs else None

    procs = wait_until(moved, 600, "the replica to come back on the spare node")
    assert set(procs) == {cluster.head_node.node_id, spare.node_id}
    old_rank0 = before[cluster.head_node.node_id]
    assert not set(old_rank0) & set(procs[cluster.head_node.node_id]), "rank 0 was not restarted"
    _assert_same_tokens(_complete(base_url), reference())


@pytest.mark.slow
def test_losing_the_other_node_with_no_room_left_says_why(two_nodes, tiny_model):
    from raylite import serve

    cluster, other = two_nodes
    _deploy(_config(tiny_model, tensor_parallel_size=2))
    before = _assert_engine_on_both(cluster, other)
    cluster.remove_node(other, allow_graceful=False)

    def failed_with_reason() -> str:
        dep = serve.status().applications["default"].deployments["LLMServer:tiny"]
        return dep.message if dep.status == "DEPLOY_FAILED" else ""

    message = wait_until(failed_with_reason, 300, "the deployment to report why it cannot restart")
    assert "can never be placed" in message and "add nodes" in message, message
    # the old engine's processes on the surviving node are gone with the replica
    wait_until(lambda: not any(_alive(p) for p in before[cluster.head_node.node_id]), 120,
         "rank 0's engine processes to exit")


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
