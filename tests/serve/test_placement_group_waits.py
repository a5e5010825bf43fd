"""A replica waiting for its placement group: serve.status() says what it waits for (the bundles,
the nodes lacking them), and one that can never be placed beside Serve's other replicas fails at
deploy time naming the fix (the seed's TP=2 LLM replica with Ray's default 1-CPU ingress on two
1-CPU nodes waited forever, UPDATING with an empty message)."""

from __future__ import annotations

import time

import pytest

import raylite as ray
from raylite import serve
from tests.serve_llm.conftest import free_port

pytestmark = pytest.mark.timeout(240)


@serve.deployment
class Echo:
    def __call__(self) -> str:
        return "ok"


@pytest.fixture
def two_one_cpu_nodes():
    from raylite.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cluster.connect()
    try:
        yield cluster
    finally:
        try:
            serve.shutdown()
        finally:
            cluster.shutdown()


def _status(app: str, name: str):
    return serve.status().applications[app].deployments[name]


def test_updating_says_which_bundles_wait_and_which_nodes_lack_them(two_one_cpu_nodes):
    @ray.remote(num_cpus=1)
    class Hold:
        def ready(self):
            return True

    holders = [Hold.remote() for _ in range(2)]  # every CPU of the cluster
    ray.get([h.ready.remote() for h in holders], timeout=60)
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
    dep = Echo.options(name="grouped", placement_group_bundles=[{"CPU": 1}],
                       ray_actor_options={"num_cpus": 1})
    serve.run(dep.bind(), name="waits", route_prefix=None, _wait_for_running=False)
    deadline = time.monotonic() + 60
    st = _status("waits", "grouped")
    while "placement group" not in st.message and time.monotonic() < deadline:
        time.sleep(0.3)
        st = _status("waits", "grouped")
    assert st.status == "UPDATING"
    assert "waiting for its placement group" in st.message and "1 bundles [{CPU: 1}], 0 placed" in st.message
    assert st.message.count("has {CPU: 0} of {CPU: 1} free") == 2  # both nodes lack it
    ray.kill(holders[0])  # room on one node: the replica starts and the message goes
    deadline = time.monotonic() + 60
    while _status("waits", "grouped").status != "HEALTHY" and time.monotonic() < deadline:
        time.sleep(0.3)
    st = _status("waits", "grouped")
    assert st.status == "HEALTHY" and "placement group" not in st.message


def test_a_group_that_can_never_fit_beside_the_ingress_fails_at_deploy_naming_the_fix(two_one_cpu_nodes):
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
    serve.run(Echo.options(name="ingress").bind(), name="front", route_prefix="/front")  # 1 CPU
    dep = Echo.options(name="tp2", placement_group_bundles=[{"CPU": 1}, {"CPU": 1}],
                       ray_actor_options={"num_cpus": 0})
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        serve.run(dep.bind(), name="llm", route_prefix="/llm")
    text = str(err.value)
    assert "can never be placed" in text and "'ingress' holds CPU=1" in text
    assert "'num_cpus': 0" in text and "add nodes" in text
    assert time.monotonic() - started < 60  # said at deploy time, not after a long wait
    st = _status("llm", "tp2")
    assert st.status == "DEPLOY_FAILED" and "can never be placed" in st.message
