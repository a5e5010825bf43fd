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


class _Node:
    def __init__(self, nid: bytes, cpus: float, free: float | None = None) -> None:
        self.node_id = nid
        self.total = R.to_fixed({"CPU": cpus})
        self.available = R.to_fixed({"CPU": cpus if free is None else free})
        self.alive = True


def _ring(n: int, **kw) -> tuple[S.NodeRing, dict]:
    ring, nodes = S.NodeRing(), {}
    for i in range(n):
        nid = i.to_bytes(2, "big") * 8
        nodes[nid] = _Node(nid, 1, **kw)
        ring.add(nid)
    return ring, nodes


def test_a_spread_batch_visits_every_node_once_before_repeating():
    ring, nodes = _ring(10)
    one = R.to_fixed({"CPU": 1})
    picks = [ring.pick_spread(one, nodes, b"batch-a") for _ in range(10)]
    assert len({nid for nid, _ in picks}) == 10
    assert [covered for _, covered in picks] == [False] * 9 + [True]
    # another batch starts elsewhere on the ring, and covers every node too
    other = [ring.pick_spread(one, nodes, b"batch-b")[0] for _ in range(10)]
    assert set(other) == set(nodes) and other[0] != picks[0][0]


def test_spread_skips_nodes_without_room_and_settles_when_none_has_room():
    ring, nodes = _ring(5)
    one = R.to_fixed({"CPU": 1})
    busy = list(nodes)[1:3]
    for nid in busy:
        nodes[nid].available = R.to_fixed({"CPU": 0})
    got = {ring.pick_spread(one, nodes, b"b")[0] for _ in range(3)}
    assert got == set(nodes) - set(busy)
    full, fnodes = _ring(200, free=0)
    nid, covered = full.pick_spread(one, fnodes, b"x")
    assert nid in fnodes and covered  # nothing has room: a feasible node, and nothing left to cover
    small, snodes = _ring(4, free=0)  # (a stale view looks like this too) the picks still rotate
    assert len({small.pick_spread(one, snodes, b"y")[0] for _ in range(4)}) == 4


def test_default_pick_looks_at_a_window_not_every_node():
    ring, nodes = _ring(1000, free=0)
    last = list(nodes)[-1]
    nodes[last].available = R.to_fixed({"CPU": 1})
    one = R.to_fixed({"CPU": 1})
    assert ring.pick_default(one, nodes) == last  # walks on until a node has room
    small, snodes = _ring(3)
    roomy = list(snodes)[2]
    snodes[roomy].total = snodes[roomy].available = R.to_fixed({"CPU": 4})
    assert small.pick_default(one, snodes) == roomy  # <= WINDOW nodes: the roomiest of all


def test_ring_drops_dead_nodes_and_caches_feasibility_until_nodes_change():
    ring, nodes = _ring(40)
    ids = list(nodes)
    two = R.to_fixed({"CPU": 2})
    assert not ring.feasible(two, nodes)
    big = b"\xff" * 16
    nodes[big] = _Node(big, 2)
    ring.add(big)
    assert ring.feasible(two, nodes)
    for nid in ids[:30]:  # past half dead: the ring compacts
        ring.remove(nid)
    assert len(ring) == 11
    one = R.to_fixed({"CPU": 1})
    picks = {ring.pick_spread(one, nodes, b"c")[0] for _ in range(11)}
    assert picks == set(ids[30:]) | {big}
