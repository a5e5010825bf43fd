"""Pure placement policies."""

from __future__ import annotations

from raylite._core import resources as R
from raylite._core import scheduling as S


def node(nid: bytes, total: dict, avail: dict | None = None) -> S.NodeView:
    t = R.to_fixed(total)
    return S.NodeView(nid, t, R.to_fixed(avail) if avail is not None else dict(t))


def test_infeasible_names_request_and_capacity():
    res = S.pick_node(R.to_fixed({"GPU": 1}), [node(b"a" * 16, {"CPU": 2})])
    assert isinstance(res, S.Infeasible)
    assert "GPU: 1" in res.reason and "CPU: 2" in res.reason


def test_waits_when_busy_and_prefers_local():
    busy = node(b"a" * 16, {"CPU": 2}, {"CPU": 0})
    assert S.pick_node(R.to_fixed({"CPU": 1}), [busy]) is None
    n1, n2 = node(b"a" * 16, {"CPU": 2}), node(b"b" * 16, {"CPU": 8})
    assert S.pick_node(R.to_fixed({"CPU": 1}), [n1, n2], local_node=n1.node_id) is n1


def test_spread_round_robin_and_node_affinity():
    nodes = [node(bytes([i]) * 16, {"CPU": 1}) for i in range(3)]
    picks = {S.pick_node(R.to_fixed({"CPU": 1}), nodes, ["SPREAD"], spread_counter=i).node_id for i in range(3)}
    assert len(picks) == 3
    target = nodes[2].node_id.hex()
    assert S.pick_node(R.to_fixed({"CPU": 1}), nodes, ["NODE", target, False]) is nodes[2]
    res = S.pick_node(R.to_fixed({"CPU": 1}), nodes, ["NODE", "ff" * 16, False])
    assert isinstance(res, S.Infeasible)


def test_bundle_strategies():
    a, b = node(b"a" * 16, {"CPU": 2}), node(b"b" * 16, {"CPU": 2})
    one = [R.to_fixed({"CPU": 1})] * 2
    assert S.place_bundles(one, "STRICT_PACK", [a, b]) == [a.node_id, a.node_id]
    spread = S.place_bundles(one, "STRICT_SPREAD", [a, b])
    assert sorted(spread) == sorted([a.node_id, b.node_id])
    assert isinstance(S.place_bundles([R.to_fixed({"CPU": 1})] * 3, "STRICT_SPREAD", [a, b]), S.Infeasible)
    assert isinstance(S.place_bundles([R.to_fixed({"CPU": 3})], "PACK", [a, b]), S.Infeasible)
    assert S.place_bundles([R.to_fixed({"CPU": 2})] * 2, "PACK", [a, b]) is not None


def test_fractional_resources_are_exact():
    avail = R.to_fixed({"CPU": 1})
    for _ in range(10):
        R.subtract(avail, R.to_fixed({"CPU": 0.1}))
    assert avail["CPU"] == 0
