"""Where a multi-node engine's ranks go (pure), and which vLLM executor is asked for."""

from __future__ import annotations

import pytest

from raylite.serve.llm._internal.engine_layout import one_node_threads_bind, plan_layout
from raylite.serve.llm._internal.vllm_engine import choose_executor

IPS = {"A": "10.0.0.1", "B": "10.0.0.2", "C": "10.0.0.3"}


def test_seed_layout_tp4_pp2_over_two_nodes():
    # 70B across 2 nodes with 4 GPUs each: 8 bundles, 4 per node
    bundles = {i: ("A" if i < 4 else "B") for i in range(8)}
    layout = plan_layout(bundles, IPS, "A", 8)
    assert layout.spans_nodes and layout.nnodes == 2 and layout.local_world_size == 4
    assert [(n.node_id, n.node_rank, n.bundle_indices) for n in layout.nodes] == [
        ("A", 0, (0, 1, 2, 3)), ("B", 1, (4, 5, 6, 7))]
    assert layout.master_addr == "10.0.0.1"
    # separate machines: each node splits its own cores among its 4 local ranks
    assert layout.omp_threads_bind(1, range(8)) == "0,1|2,3|4,5|6,7"


def test_the_replicas_node_is_rank_0_whatever_its_bundle_numbers():
    layout = plan_layout({0: "B", 1: "A"}, IPS, "B", 2)
    assert [n.node_id for n in layout.nodes] == ["B", "A"]


def test_one_node_is_not_multi_node():
    assert not plan_layout({0: "A", 1: "A"}, IPS, "A", 2).spans_nodes
    assert not plan_layout({}, IPS, "A", 1).spans_nodes


def test_nodes_sharing_a_machine_split_its_cores_among_all_ranks():
    same = {"A": "127.0.0.1", "B": "127.0.0.1"}
    layout = plan_layout({0: "A", 1: "B"}, same, "A", 2)
    assert layout.one_machine()
    assert (layout.omp_threads_bind(0, [0, 1]), layout.omp_threads_bind(1, [0, 1])) == ("0", "1")
    # fewer cores than ranks: ranks share cores round-robin rather than fail
    four = plan_layout({0: "A", 1: "A", 2: "B", 3: "B"}, same, "A", 4)
    assert four.omp_threads_bind(1, [0, 1]) == "0|1"


def test_uneven_bundles_are_refused_naming_the_strategy():
    with pytest.raises(ValueError, match="STRICT_SPREAD"):
        plan_layout({0: "A", 1: "A", 2: "B"}, IPS, "A", 3)


def test_bundle_count_must_match_the_ranks():
    with pytest.raises(ValueError, match="one bundle per rank"):
        plan_layout({0: "A", 1: "B", 2: "C"}, IPS, "A", 2)


def test_executor_is_always_named_and_ray_on_cpus_is_refused_with_the_fix():
    assert choose_executor(None, True, "m", 2) == "mp"
    assert choose_executor(None, True, "m", 1) == "uni"
    assert choose_executor("ray", False, "m", 2) == "ray"
    with pytest.raises(ValueError, match="does not run on CPUs.*Remove distributed_executor_backend"):
        choose_executor("ray", True, "m", 2)
    with pytest.raises(ValueError, match="vLLM knows"):
        choose_executor("threads", False, "m", 2)


def test_several_ranks_on_one_node_get_a_core_each():
    # vLLM's automatic binding refuses two ranks on one NUMA node; raylite names the cores
    assert one_node_threads_bind(2, [0, 1]) == "0|1"
    assert one_node_threads_bind(2, [0, 1, 2, 3]) == "0,1|2,3"
