"""The autoscaling policy (raylite/autoscaler/policy.py), by worked examples: plain values in,
a Decision out; no clock, no sockets (idle seconds are an input, as the head measures them)."""

from __future__ import annotations

from raylite.autoscaler.policy import (
    Config,
    Demand,
    NodeType,
    PlacementGroupDemand,
    WorkerNode,
    decide,
)

SMALL = NodeType("small", {"CPU": 1}, min_workers=0, max_workers=5)
BIG = NodeType("big", {"CPU": 4}, min_workers=0, max_workers=2)
GPU = NodeType("gpu", {"CPU": 8, "GPU": 1}, min_workers=0, max_workers=1)
HEAD_FULL = ({"CPU": 0}, {"CPU": 1})  # the head: 1 CPU, all in use


def running(node_id: str, t: NodeType, free: dict | None = None, idle_s: float = 0.0) -> WorkerNode:
    return WorkerNode(node_id, t.name, "running", dict(t.resources if free is None else free),
                      dict(t.resources), idle_s)


def test_three_cpus_of_demand_launch_three_one_cpu_nodes():
    # three 1-CPU tasks wait, the head is full: the cheapest type that fits is `small`
    d = decide(Config([SMALL, BIG]), [], Demand([{"CPU": 1}] * 3, unmanaged=[HEAD_FULL]))
    assert d.launch == {"small": 3} and d.terminate == [] and not d.infeasible


def test_demands_fill_free_room_and_launching_nodes_first():
    # one small node is free, one is launching: two of four demands fit there, two launch
    workers = [running("w1", SMALL), WorkerNode("w2", "small", "launching")]
    d = decide(Config([SMALL]), workers, Demand([{"CPU": 1}] * 4, unmanaged=[HEAD_FULL]))
    assert d.launch == {"small": 2}


def test_bin_packing_puts_several_demands_on_one_new_node():
    # only `big` fits a 3-CPU demand; the 1-CPU demand then packs onto that same new node
    d = decide(Config([BIG]), [], Demand([{"CPU": 3}, {"CPU": 1}]))
    assert d.launch == {"big": 1}


def test_never_above_max_workers_and_the_reason_is_kept():
    workers = [running(f"w{i}", BIG, free={"CPU": 0}) for i in range(2)]
    d = decide(Config([BIG]), workers, Demand([{"CPU": 2}]))
    assert d.launch == {}
    assert d.capped and "max_workers" in d.capped[0][1]


def test_min_workers_are_kept_up_without_demand():
    t = NodeType("small", {"CPU": 1}, min_workers=2, max_workers=5)
    assert decide(Config([t]), [running("w1", t)], Demand()).launch == {"small": 1}


def test_a_demand_no_node_type_fits_is_infeasible_with_the_reason():
    d = decide(Config([SMALL, BIG]), [], Demand([{"GPU": 1}]))
    assert d.launch == {}
    [(demand, why)] = d.infeasible
    assert demand == {"GPU": 1} and "no node type can ever fit {GPU: 1}" in why and "big has {CPU: 4}" in why


def test_gpu_demand_picks_the_gpu_type_even_though_it_costs_more():
    d = decide(Config([SMALL, BIG, GPU]), [], Demand([{"GPU": 1, "CPU": 1}]))
    assert d.launch == {"gpu": 1}


def test_idle_nodes_past_the_timeout_are_terminated_longest_idle_first_within_min():
    t = NodeType("small", {"CPU": 1}, min_workers=1, max_workers=5)
    workers = [running("a", t, idle_s=70), running("b", t, idle_s=90), running("c", t, idle_s=10),
               running("d", t, free={"CPU": 0}, idle_s=0)]
    d = decide(Config([t], idle_timeout_s=60), workers, Demand())
    assert d.terminate == ["b", "a"]  # c is not idle long enough; d is busy
    # with min_workers=3 only one may go: the longest idle
    t3 = NodeType("small", {"CPU": 1}, min_workers=3, max_workers=5)
    assert decide(Config([t3], idle_timeout_s=60), workers, Demand()).terminate == ["b"]


def test_an_idle_node_that_a_demand_packs_onto_stays():
    workers = [running("a", SMALL, idle_s=500)]
    d = decide(Config([SMALL], idle_timeout_s=60), workers, Demand([{"CPU": 1}], unmanaged=[HEAD_FULL]))
    assert d.terminate == [] and d.launch == {}


def test_request_resources_counts_totals_not_free_room():
    # two busy small nodes: request_resources(num_cpus=3) asks for one more, whatever runs
    workers = [running("a", SMALL, free={"CPU": 0}), running("b", SMALL, free={"CPU": 0})]
    d = decide(Config([SMALL]), workers, Demand(requested=[{"CPU": 1}] * 3))
    assert d.launch == {"small": 1}
    # and nodes it covers are not terminated when idle
    idle = [running("a", SMALL, idle_s=100), running("b", SMALL, idle_s=100)]
    d = decide(Config([SMALL], idle_timeout_s=60), idle, Demand(requested=[{"CPU": 1}] * 2))
    assert d.terminate == [] and d.launch == {}


def test_placement_groups_strict_spread_needs_one_node_per_bundle():
    pg = PlacementGroupDemand([{"CPU": 1}] * 3, "STRICT_SPREAD")
    assert decide(Config([BIG]), [], Demand(placement_groups=[pg])).launch == {"big": 2}  # max 2: one capped
    assert decide(Config([SMALL, BIG]), [], Demand(placement_groups=[pg])).launch == {"small": 3}
    packed = PlacementGroupDemand([{"CPU": 1}] * 3, "STRICT_PACK")
    assert decide(Config([SMALL, BIG]), [], Demand(placement_groups=[packed])).launch == {"big": 1}


def test_upscaling_speed_caps_launches_in_flight():
    t = NodeType("small", {"CPU": 1}, max_workers=100)
    d = decide(Config([t], upscaling_speed=1.0), [], Demand([{"CPU": 1}] * 20))
    assert d.launch == {"small": 5}  # at least 5 at once, then upscaling_speed x running nodes
    workers = [running(f"w{i}", t, free={"CPU": 0}) for i in range(10)]
    d = decide(Config([t], upscaling_speed=2.0), workers, Demand([{"CPU": 1}] * 30))
    assert d.launch == {"small": 20}


def test_node_ip_and_accelerator_type_resources_do_not_block_a_fit():
    d = decide(Config([SMALL]), [], Demand([{"CPU": 1, "node:10.0.0.5": 0.001}]))
    assert d.launch == {"small": 1}


def test_raylite_status_shows_the_autoscalers_view():
    import time

    from raylite._core.cluster.cluster import format_status

    view = {"time": time.time(), "idle_timeout_s": 60, "launching": 2,
            "pending_launches": {"small": 2, "big": 0},
            "workers": [{"node_id": "w1", "node_type": "small", "status": "running", "idle_s": 42.0},
                        {"node_id": "w2", "node_type": "small", "status": "running", "idle_s": 0.0},
                        {"node_id": "w3", "node_type": "small", "status": "launching", "idle_s": 0.0}],
            "terminating": ["w9"],
            "infeasible": [{"demand": {"GPU": 2.0}, "reason": "no node type can ever fit {GPU: 2}"}],
            "capped": [], "provider_busy": False}
    st = {"address": "h:1", "nodes": [], "total": {}, "used": {}, "pending": [], "infeasible": [],
          "autoscaler": view}
    text = format_status(st)
    assert "Autoscaler (view of 0s ago, idle timeout 60s)" in text
    assert "pending launches: 2 small" in text and "big" not in text
    assert "small  w1  idle 42s" in text and "small  w2  busy" in text and "small  w3  launching" in text
    assert "terminating idle node w9" in text
    assert "cannot meet {'GPU': 2.0}: no node type can ever fit {GPU: 2}" in text
    assert "Autoscaler" not in format_status({**st, "autoscaler": None})


def test_request_resources_rejects_bad_arguments_before_touching_the_cluster():
    import pytest

    from raylite.autoscaler.sdk import request_resources

    with pytest.raises(TypeError, match="whole number"):
        request_resources(num_cpus=-1)
    with pytest.raises(TypeError, match="whole number"):
        request_resources(num_cpus=1.5)
    with pytest.raises(TypeError, match="resource name -> amount"):
        request_resources(bundles=[{"CPU": "many"}])
