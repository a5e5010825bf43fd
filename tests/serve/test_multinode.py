"""Serve on a real multi-node cluster (loopback): replicas spread over nodes, and a replica on a
node that dies is replaced on another node while the app keeps answering."""

import httpx
import pytest

import raylite
from tests.cluster.conftest import make_cluster, wait_until  # noqa: F401 - fixture
from tests.serve.conftest import free_port


@pytest.mark.slow
def test_replica_on_dead_node_is_replaced_elsewhere(make_cluster):  # noqa: F811
    from raylite import serve
    from raylite.serve._internal.client import get_controller

    c = make_cluster()
    head = c.add_head(num_cpus=2)
    workers = [c.add_node(num_cpus=2), c.add_node(num_cpus=2)]
    wait_until(lambda: len(c.alive_ids()) == 3, timeout_s=30, what="three nodes")
    raylite.init(address="auto")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 2})
    def where(request) -> str:
        return raylite.get_runtime_context().get_node_id()

    serve.run(where.bind(), name="where", route_prefix="/where")

    def replicas() -> list[dict]:
        return [r for r in raylite.get(get_controller().list_replicas.remote("where", "where"))
                if r["state"] == "RUNNING"]

    first = replicas()
    nodes = {r["node_id"] for r in first}
    assert len(nodes) == 2  # one 2-CPU replica per node
    victim = next(w for w in workers if w.node_id in nodes)
    survivor = next(r for r in first if r["node_id"] != victim.node_id)
    c.kill_node(victim)
    wait_until(lambda: len(replicas()) == 2 and victim.node_id not in {r["node_id"] for r in replicas()},
               timeout_s=60, what="a replacement replica on a live node")
    assert survivor["replica_id"] in {r["replica_id"] for r in replicas()}
    answers = {httpx.get(f"http://127.0.0.1:{port}/where", timeout=10).text for _ in range(10)}
    assert victim.node_id not in answers and answers <= {head.node_id, *(w.node_id for w in workers)}
    serve.shutdown()


@pytest.mark.slow
def test_max_replicas_per_node_spreads_replicas_over_nodes(make_cluster):  # noqa: F811
    from raylite import serve
    from raylite.serve._internal.client import get_controller

    c = make_cluster()
    head = c.add_head(num_cpus=4)
    workers = [c.add_node(num_cpus=4), c.add_node(num_cpus=4)]
    wait_until(lambda: len(c.alive_ids()) == 3, timeout_s=30, what="three nodes")
    raylite.init(address="auto")
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})

    @serve.deployment(num_replicas=3, max_replicas_per_node=1, ray_actor_options={"num_cpus": 0.5})
    def where() -> str:
        return raylite.get_runtime_context().get_node_id()

    serve.run(where.bind(), name="spread", route_prefix="/spread")  # would all fit on the head node
    running = [r for r in raylite.get(get_controller().list_replicas.remote("spread", "where"))
               if r["state"] == "RUNNING"]
    assert sorted(r["node_id"] for r in running) == sorted([head.node_id, *(w.node_id for w in workers)])
    with pytest.raises(RuntimeError, match="max_replicas_per_node=1"):
        serve.run(where.options(num_replicas=4).bind(), name="spread", route_prefix="/spread", timeout_s=60)
    serve.shutdown()
