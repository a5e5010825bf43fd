"""Every node carries Ray's built-in `ray.io/node-id` label, so a label selector on it pins a
task to one node (Ray's tests and users place work this way: test_wait_always_fetch_local)."""

from __future__ import annotations

import raylite
from raylite.cluster_utils import Cluster


def test_a_selector_on_the_node_id_label_pins_tasks_to_that_node():
    cluster = Cluster()
    try:
        head = cluster.add_node(num_cpus=1)
        raylite.init(address=cluster.address)
        worker = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()

        @raylite.remote(num_cpus=0)
        def where():
            return raylite.get_runtime_context().get_node_id()

        key = raylite._raylet.RAY_NODE_ID_KEY
        for node in (head, worker):
            pinned = where.options(label_selector={key: node.node_id})
            assert set(raylite.get([pinned.remote() for _ in range(4)], timeout=60)) == {node.node_id}
        labels = {n["NodeID"]: n["Labels"] for n in raylite.nodes()}
        assert labels[worker.node_id][key] == worker.node_id
        assert labels[head.node_id][key] == head.node_id
    finally:
        raylite.shutdown()
        cluster.shutdown()
