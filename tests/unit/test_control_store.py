"""The head's pure tables (control_store): plain calls, a FakeClock, effects checked by value."""

from __future__ import annotations

import pytest

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import FakeClock
from raylite._core.head import control_store as CS
from raylite._core.head.control_store import ActorState, ControlStore, PlacementGroupState
from raylite._core.task_spec import KIND_ACTOR_CREATE, FunctionDescriptor, TaskSpec

N1, N2 = b"1" * 16, b"2" * 16


def store_with_nodes(*node_ids: bytes, cpus: int = 2, timeout_s: float = 5.0) -> tuple[ControlStore, FakeClock]:
    clock = FakeClock()
    store = ControlStore(clock, node_dead_timeout_s=timeout_s)
    for nid in node_ids:
        error, _ = store.register_node(nid, f"tcp://10.0.0.{nid[0]}:1", "10.0.0.1",
                                       R.to_fixed({"CPU": cpus}), {}, "/tmp/store")
        assert error == ""
    return store, clock


def actor_spec(actor_id: bytes, *, name: str = "", namespace: str = "ns", max_restarts: int = 0,
               owner: bytes = b"owner", detached: bool = False, resources: dict | None = None) -> TaskSpec:
    return TaskSpec(task_id=b"t" * 16, job_id=b"j" * 4, kind=KIND_ACTOR_CREATE,
                    function=FunctionDescriptor("m", "Counter", b"f"), args=[], arg_refs=[], num_returns=1,
                    owner_address="", owner_worker_id=owner,
                    resources=R.to_fixed(resources or {"CPU": 1}), actor_id=actor_id,
                    max_restarts=max_restarts, actor_name=name, namespace=namespace, detached=detached)


def started(store: ControlStore, actor_id: bytes, worker_id: bytes = b"w1") -> list:
    """Run one placement attempt and have its node answer that the actor is up."""
    [start] = store.place_actor(actor_id)
    assert isinstance(start, CS.StartActorOn)
    return store.actor_start_replied(actor_id, start.node_id,
                                     P.StartActorReply(True, "tcp://10.0.0.1:9", worker_id, 42))


# ------------------------------------------------------------------ nodes
def test_node_registers_and_expires_after_the_timeout():
    store, clock = store_with_nodes(N1, N2)
    assert [n.alive for n in store.nodes.values()] == [True, True]
    clock.advance(4.0)
    assert store.heartbeat(N2, R.to_fixed({"CPU": 1}), None, [])
    clock.advance(1.5)
    effects = store.expire_silent_nodes()
    assert CS.MarkNodeDead(N1, "no heartbeat for 5s (its host is down or its network link is cut)") in effects
    assert any(isinstance(e, CS.Broadcast) and e.msg.node_id == N1 for e in effects)
    assert not store.nodes[N1].alive and store.nodes[N2].alive
    assert store.nodes[N2].available == R.to_fixed({"CPU": 1})
    assert store.expire_silent_nodes() == []  # dead once, not twice
    assert store.heartbeat(N1, {}, None, []) is False  # a dead node learns it must fence itself
    error, _ = store.register_node(N1, "tcp://x:1", "x", {}, {}, "")
    assert "declared dead" in error


def test_stalled_check_gives_every_node_a_fresh_timeout():
    store, clock = store_with_nodes(N1)
    clock.advance(10.0)
    store.grant_fresh_timeout()
    assert store.expire_silent_nodes() == []


def test_only_the_current_link_closing_kills_a_node():
    clock = FakeClock()
    store = ControlStore(clock, 5.0)
    old, new = object(), object()
    store.register_node(N1, "tcp://x:1", "x", {}, {}, "", link=old)
    store.register_node(N1, "tcp://x:1", "x", {}, {}, "", link=new)  # reconnected
    assert store.link_closed(N1, old) == []
    assert any(isinstance(e, CS.MarkNodeDead) for e in store.link_closed(N1, new))


def test_unix_nodes_never_expire():
    clock = FakeClock()
    store = ControlStore(clock, 5.0)
    store.register_node(N1, "unix:///tmp/x/node", "", {}, {}, "")
    clock.advance(100.0)
    assert store.expire_silent_nodes() == []


# ------------------------------------------------------------------ actors
def test_actor_lifecycle_with_max_restarts():
    store, _ = store_with_nodes(N1)
    rec, reused, effects = store.register_actor(actor_spec(b"a1", max_restarts=1), get_if_exists=False)
    assert not reused and rec.state is ActorState.PENDING and CS.ScheduleActor(b"a1") in effects
    assert CS.ActorChanged(b"a1") in started(store, b"a1")
    assert rec.state is ActorState.ALIVE and rec.node_id == N1 and store.actor_settled(b"a1", 0) is False

    effects = store.worker_died(b"w1", b"a1", "it segfaulted")
    assert rec.state is ActorState.RESTARTING and rec.num_restarts == 1
    assert CS.ScheduleActor(b"a1") in effects and rec.address == ""
    started(store, b"a1", worker_id=b"w2")
    assert rec.state is ActorState.ALIVE and store.actor_settled(b"a1", 0)

    store.worker_died(b"w2", b"a1", "it segfaulted again")
    assert rec.state is ActorState.DEAD and rec.num_restarts == 1
    assert rec.death_cause == "The actor died: it segfaulted again"
    assert store.place_actor(b"a1") == []  # DEAD is terminal


def test_a_stale_worker_death_does_not_touch_the_actor():
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1"), False)
    started(store, b"a1", worker_id=b"w2")
    assert store.worker_died(b"w-old", b"a1", "old") == []
    assert store.actors[b"a1"].state is ActorState.ALIVE


def test_node_death_restarts_or_kills_its_actors():
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1", max_restarts=-1), False)
    store.register_actor(actor_spec(b"a2"), False)
    started(store, b"a1")
    started(store, b"a2", worker_id=b"w2")
    effects = store.node_lost(N1, "it was stopped")
    assert store.actors[b"a1"].state is ActorState.RESTARTING and CS.ScheduleActor(b"a1") in effects
    assert store.actors[b"a2"].state is ActorState.DEAD and "it was stopped" in store.actors[b"a2"].death_cause


def test_an_actor_killed_while_starting_has_its_process_stopped_when_the_node_answers():
    """raylite.kill() between the StartActor request and its reply (a Pool terminated right after
    it was made): the worker that came up must be stopped, or it holds the actor's CPU for good."""
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1"), False)
    [start] = store.place_actor(b"a1")
    store.kill_actor(b"a1", no_restart=True)
    assert store.actors[b"a1"].state is ActorState.DEAD
    effects = store.actor_start_replied(b"a1", start.node_id, P.StartActorReply(True, "tcp://10.0.0.1:9", b"w1", 42))
    assert effects == [CS.KillWorkerOn(N1, b"w1", "its actor was killed while it was starting")]
    assert store.actors[b"a1"].state is ActorState.DEAD


def test_unschedulable_actor_dies_at_once():
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1", resources={"GPU": 1}), False)
    effects = store.place_actor(b"a1")
    assert CS.ActorChanged(b"a1") in effects
    assert store.actors[b"a1"].death_cause.startswith("UNSCHEDULABLE: The actor Counter cannot be scheduled")


def test_constructor_error_and_owner_exit():
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1", max_restarts=5), False)
    [start] = store.place_actor(b"a1")
    store.actor_start_replied(b"a1", start.node_id, P.StartActorReply(False, error=b"pickled"))
    assert store.actors[b"a1"].state is ActorState.DEAD and store.actors[b"a1"].creation_error == b"pickled"

    store.register_actor(actor_spec(b"a2", owner=b"drv", max_restarts=5), False)
    store.register_actor(actor_spec(b"a3", owner=b"drv", detached=True), False)
    started(store, b"a2", worker_id=b"w2")
    effects = store.worker_died(b"drv", b"", "driver exited")
    assert CS.KillWorkerOn(N1, b"w2", "owner died") in effects
    assert store.actors[b"a2"].state is ActorState.DEAD and "owner" in store.actors[b"a2"].death_cause
    assert store.actors[b"a3"].state is ActorState.PENDING  # detached: outlives its creator


def test_kill_actor():
    store, _ = store_with_nodes(N1)
    store.register_actor(actor_spec(b"a1", max_restarts=3), False)
    store.register_actor(actor_spec(b"a2"), False)
    started(store, b"a1")
    assert store.kill_actor(b"a1", no_restart=True) == [CS.KillWorkerOn(N1, b"w1", "killed by raylite.kill()")]
    store.worker_died(b"w1", b"a1", "killed")
    assert store.actors[b"a1"].state is ActorState.DEAD  # no_restart wins over max_restarts
    store.kill_actor(b"a2", no_restart=True)  # never started
    assert store.actors[b"a2"].state is ActorState.DEAD and "before it started" in store.actors[b"a2"].death_cause
    assert store.kill_actor(b"unknown", True) == []


def test_named_actors_namespaces_and_get_if_exists():
    store, _ = store_with_nodes(N1)
    first, _, effects = store.register_actor(actor_spec(b"a1", name="counter", namespace="ns1"), False)
    assert any(isinstance(e, CS.Persist) and e.table == "named" for e in effects)
    store.register_actor(actor_spec(b"a2", name="counter", namespace="ns2"), False)
    assert store.named_actor("ns1", "counter") is first
    assert store.named_actor("ns2", "counter").spec.actor_id == b"a2"
    assert store.named_actor("ns3", "counter") is None
    with pytest.raises(ValueError, match="already taken"):
        store.register_actor(actor_spec(b"a3", name="counter", namespace="ns1"), False)
    rec, reused, effects = store.register_actor(actor_spec(b"a4", name="counter", namespace="ns1"), True)
    assert reused and rec is first and effects == [] and b"a4" not in store.actors
    assert store.named_actors("ns1", all_namespaces=False) == [{"name": "counter", "namespace": "ns1"}]
    assert len(store.named_actors("", all_namespaces=True)) == 2
    store.kill_actor(b"a1", no_restart=True)  # PENDING + no_restart: dead now, the name is free again
    assert store.named_actor("ns1", "counter") is None
    rec, reused, _ = store.register_actor(actor_spec(b"a5", name="counter", namespace="ns1"), False)
    assert not reused and store.named_actor("ns1", "counter") is rec


# ------------------------------------------------------------------ placement groups
def test_placement_group_created_then_removed():
    store, _ = store_with_nodes(N1, N2, cpus=1)
    bundles = [R.to_fixed({"CPU": 1}), R.to_fixed({"CPU": 1})]
    effects = store.create_placement_group(b"pg1", bundles, "STRICT_SPREAD", "g", "ns", False)
    assert CS.PlacePlacementGroup(b"pg1") in effects
    [plan] = store.plan_placement_group(b"pg1")
    assert isinstance(plan, CS.ReserveBundles) and sorted(plan.bundle_nodes) == [N1, N2]
    effects = store.bundles_reserved(plan, list(plan.by_node), ok=True)
    pg = store.pgs[b"pg1"]
    assert pg.state is PlacementGroupState.CREATED and CS.PlacementGroupChanged(b"pg1") in effects
    assert store.find_placement_group(b"", "g", "ns") is pg
    assert store.plan_placement_group(b"pg1") == []  # placed: nothing more to do

    store.register_actor(actor_spec(b"a1", resources={f"CPU_group_{b'pg1'.hex()}": 1}), False)
    effects = store.remove_placement_group(b"pg1")
    assert pg.state is PlacementGroupState.REMOVED and CS.Unpersist("pgs", b"pg1") in effects
    assert {e.node_id for e in effects if isinstance(e, CS.ReleaseBundlesOn)} == {N1, N2}
    assert store.actors[b"a1"].state is ActorState.DEAD
    assert store.find_placement_group(b"", "g", "ns") is None


def test_placement_group_waits_retries_and_is_infeasible():
    store, _ = store_with_nodes(N1, cpus=1)
    store.heartbeat(N1, {}, None, [])  # no room now
    store.create_placement_group(b"pg1", [R.to_fixed({"CPU": 1})], "PACK", "", "", False)
    assert store.plan_placement_group(b"pg1") == [CS.RetryPlacement(b"pg1", CS.PLACEMENT_RETRY_S)]
    store.heartbeat(N1, R.to_fixed({"CPU": 1}), None, [])
    [plan] = store.plan_placement_group(b"pg1")
    effects = store.bundles_reserved(plan, [], ok=False)  # the node refused
    assert effects == [CS.RetryPlacement(b"pg1", CS.PLACEMENT_RETRY_S)]

    store.create_placement_group(b"pg2", [R.to_fixed({"CPU": 8})], "PACK", "", "", False)
    store.plan_placement_group(b"pg2")
    assert store.pgs[b"pg2"].state is PlacementGroupState.INFEASIBLE and "never be placed" in store.pgs[b"pg2"].error
    _, effects = store.register_node(N2, "tcp://y:1", "y", R.to_fixed({"CPU": 8}), {}, "")
    assert CS.PlacePlacementGroup(b"pg2") in effects  # a new node: try again


def test_node_death_sends_its_placement_groups_back_to_pending():
    store, _ = store_with_nodes(N1)
    store.create_placement_group(b"pg1", [R.to_fixed({"CPU": 1})], "PACK", "", "", False)
    [plan] = store.plan_placement_group(b"pg1")
    store.bundles_reserved(plan, [N1], ok=True)
    effects = store.node_lost(N1, "cut")
    assert store.pgs[b"pg1"].state is PlacementGroupState.PENDING and CS.PlacePlacementGroup(b"pg1") in effects


def test_removing_a_group_a_node_died_under_releases_its_bundles_on_the_live_nodes():
    store, _ = store_with_nodes(N1, N2, cpus=1)
    bundles = [R.to_fixed({"CPU": 1}), R.to_fixed({"CPU": 1})]
    store.create_placement_group(b"pg1", bundles, "STRICT_SPREAD", "", "", False)
    [plan] = store.plan_placement_group(b"pg1")
    store.bundles_reserved(plan, list(plan.by_node), ok=True)
    survivor = next(n for n in (N1, N2) if n != plan.bundle_nodes[1])
    store.node_lost(plan.bundle_nodes[1], "cut")
    effects = store.remove_placement_group(b"pg1")
    # the live node's bundle was leaked before: its CPU stayed reserved for a group that is gone
    assert CS.ReleaseBundlesOn(survivor, b"pg1", [0]) in effects


# ------------------------------------------------------------------ key-value store, jobs, persistence
def test_kv_put_get_del_keys():
    store, _ = store_with_nodes()
    assert store.kv_put("ns", b"a/1", b"x", overwrite=True)[0] is False
    existed, effects = store.kv_put("ns", b"a/1", b"y", overwrite=False)
    assert existed and effects == [] and store.kv_get("ns", b"a/1") == b"x"
    store.kv_put("ns", b"a/2", b"z", True)
    store.kv_put("other", b"a/3", b"w", True)
    assert sorted(store.kv_keys("ns", b"a/")) == [b"a/1", b"a/2"]
    assert store.kv_get("ns", b"missing") is None
    assert store.kv_del("ns", b"a/", by_prefix=True)[0] == 2
    assert store.kv_del("ns", b"a/1", by_prefix=False) == (0, [])
    assert store.kv_keys("other", b"") == [b"a/3"]


def test_tables_survive_a_restore_from_their_persisted_rows():
    store, clock = store_with_nodes(N1)
    rows: dict[str, dict] = {}

    def keep(effects):
        for e in effects:
            if isinstance(e, CS.Persist):
                rows.setdefault(e.table, {})[e.key] = e.value
            elif isinstance(e, CS.Unpersist):
                rows.get(e.table, {}).pop(e.key, None)

    keep([store._persist_node(store.nodes[N1])])
    keep(store.register_actor(actor_spec(b"a1", name="c"), False)[2])
    keep(store.kv_put("ns", b"k", b"v", True)[1])
    keep(store.create_placement_group(b"pg1", [R.to_fixed({"CPU": 1})], "PACK", "g", "", False))
    keep(store.register_job(b"j1", "addr", "ns", "python x.py"))

    again = ControlStore(clock, 5.0)
    again.restore(lambda table: rows.get(table, {}).items())
    assert again.named_actor("", "c") is None and again.named_actor("ns", "c").spec.actor_id == b"a1"
    assert again.kv_get("ns", b"k") == b"v" and again.jobs[b"j1"]["alive"] is False
    assert set(again.resume()) == {CS.ScheduleActor(b"a1"), CS.PlacePlacementGroup(b"pg1")}
    snap = again.snapshot()
    assert snap["actors"][0]["state"] == "PENDING" and snap["nodes"][0]["alive"] is True


def test_liveness_check_reads_only_the_silent_nodes():
    """Heartbeats move a node to the back of the least-recently-seen order; the check stops at
    the first node still in time, so it costs O(expired), not O(nodes)."""
    ids = [bytes([i]) * 16 for i in range(1, 6)]
    store, clock = store_with_nodes(*ids, timeout_s=5.0)
    clock.advance(3)
    for nid in ids[2:]:
        store.heartbeat(nid, R.to_fixed({"CPU": 2}), None, [])
    clock.advance(2.5)
    effects = store.expire_silent_nodes()
    dead = {e.node_id for e in effects if isinstance(e, CS.MarkNodeDead)}
    assert dead == set(ids[:2])
    assert [n for n in ids if store.nodes[n].alive] == ids[2:]
    assert store.expire_silent_nodes() == []


def test_spread_picks_of_one_batch_cover_every_node():
    ids = [bytes([i]) * 16 for i in range(1, 8)]
    store, _ = store_with_nodes(*ids, cpus=4)
    picks = [store.pick_node(R.to_fixed({"CPU": 1}), ["SPREAD"], ids[0], None, b"burst") for _ in range(7)]
    assert {rec.node_id for rec, _ in picks} == set(ids)
    assert picks[-1][1] and not any(covered for _, covered in picks[:-1])


def test_a_restored_head_node_is_dead_at_once_and_worker_nodes_get_time_to_rejoin():
    """The head node runs in the head's process: a restarted head (a restarted KubeRay head pod)
    declares the previous one dead on resume, with a cause saying so; other nodes reconnect."""
    store, clock = store_with_nodes(N1, N2)
    store.nodes[N1].total[CS._HEAD_NODE_RESOURCE] = R.to_fixed({"x": 1})["x"]
    rows: dict[str, dict] = {}
    for nid in (N1, N2):
        e = store._persist_node(store.nodes[nid])
        rows.setdefault(e.table, {})[e.key] = e.value
    again = ControlStore(clock, 5.0)
    again.restore(lambda table: rows.get(table, {}).items())
    effects = again.resume()
    assert {e.node_id for e in effects if isinstance(e, CS.MarkNodeDead)} == {N1}
    assert not again.nodes[N1].alive and "head restarted" in again.nodes[N1].death_cause
    assert again.nodes[N2].alive


# ------------------------------------------------------------------ autoscaler (issue 27)
def _publish_node_types(store: ControlStore, launching: int = 0, **types: dict) -> None:
    import json

    view = {"node_types": {name: {"resources": res} for name, res in types.items()}, "launching": launching}
    store.kv_put(CS.AUTOSCALER_NAMESPACE, CS.AUTOSCALER_VIEW_KEY, json.dumps(view).encode(), True)


def test_without_an_autoscaler_a_request_no_node_fits_is_infeasible():
    store, _ = store_with_nodes(N1, cpus=1)
    choice, _ = store.pick_node(R.to_fixed({"CPU": 4}), [], N1)
    assert isinstance(choice, S.Infeasible)
    assert not store.launchable_fits(R.to_fixed({"CPU": 4}))


def test_an_autoscaler_node_type_that_fits_keeps_an_actor_pending_until_a_node_joins():
    store, _ = store_with_nodes(N1, cpus=1)
    _publish_node_types(store, big={"CPU": 4})
    assert store.launchable_fits(R.to_fixed({"CPU": 4}))
    assert not store.launchable_fits(R.to_fixed({"GPU": 1}))
    store.register_actor(actor_spec(b"a" * 16, resources={"CPU": 4}), False)
    assert store.place_actor(b"a" * 16) == []  # waits, not DEAD
    assert store.actors[b"a" * 16].state is ActorState.PENDING
    assert store.demands()["actors"] == [R.to_fixed({"CPU": 4})]
    _, effects = store.register_node(N2, "tcp://10.0.0.2:1", "10.0.0.2", R.to_fixed({"CPU": 4}), {}, "/tmp")
    assert CS.ScheduleActor(b"a" * 16) in effects
    assert isinstance(store.place_actor(b"a" * 16)[0], CS.StartActorOn)
    # a GPU actor still fails at once: no node type could ever fit it
    store.register_actor(actor_spec(b"g" * 16, resources={"GPU": 1}), False)
    store.place_actor(b"g" * 16)
    assert store.actors[b"g" * 16].state is ActorState.DEAD


def test_an_autoscaler_view_keeps_a_placement_group_pending_and_lists_waiting_picks():
    store, _ = store_with_nodes(N1, cpus=1)
    _publish_node_types(store, big={"CPU": 4})
    store.create_placement_group(b"p" * 16, [R.to_fixed({"CPU": 3})], "PACK", "", "ns", False)
    assert store.plan_placement_group(b"p" * 16) == []
    assert store.pgs[b"p" * 16].state is PlacementGroupState.PENDING
    key = store.wait_for_node(R.to_fixed({"CPU": 2}))
    d = store.demands()
    assert d["waiting"] == [R.to_fixed({"CPU": 2})] and d["placement_groups"][0]["strategy"] == "PACK"
    store.stop_waiting(key)
    assert store.demands()["waiting"] == []
    # the view withdrawn: infeasible again
    store.kv_del(CS.AUTOSCALER_NAMESPACE, CS.AUTOSCALER_VIEW_KEY, False)
    store.create_placement_group(b"q" * 16, [R.to_fixed({"CPU": 3})], "PACK", "", "ns", False)
    store.plan_placement_group(b"q" * 16)
    assert store.pgs[b"q" * 16].state is PlacementGroupState.INFEASIBLE


def test_while_nodes_are_launching_a_pick_with_no_room_waits_for_them():
    store, _ = store_with_nodes(N1, cpus=1)
    store.pick_node(R.to_fixed({"CPU": 1}), [], N1, R.to_fixed({"CPU": 0}))
    _publish_node_types(store, launching=2, small={"CPU": 1})
    choice, _ = store.pick_node(R.to_fixed({"CPU": 1}), [], N1, R.to_fixed({"CPU": 0}))
    assert choice is None


def test_idle_time_starts_when_nothing_uses_the_node():
    store, clock = store_with_nodes(N1, cpus=2)
    clock.advance(5)
    assert store.idle_s(N1) == 5
    store.heartbeat(N1, R.to_fixed({"CPU": 1}), None, [])  # a task holds a CPU
    assert store.idle_s(N1) == 0
    store.heartbeat(N1, R.to_fixed({"CPU": 2}), None, [], {"store_used_bytes": 100})  # an object is stored
    clock.advance(3)
    assert store.idle_s(N1) == 0
    store.heartbeat(N1, R.to_fixed({"CPU": 2}), None, [], {"store_used_bytes": 0})
    clock.advance(3)
    assert store.idle_s(N1) == 3


def test_an_autoscaler_view_not_refreshed_for_a_minute_counts_as_gone():
    store, clock = store_with_nodes(N1, cpus=1)
    _publish_node_types(store, big={"CPU": 4})
    clock.advance(CS.AUTOSCALER_VIEW_TTL_S - 1)
    assert store.launchable_fits(R.to_fixed({"CPU": 4}))
    clock.advance(2)  # the autoscaler stopped republishing: requests no node fits fail again
    assert not store.launchable_fits(R.to_fixed({"CPU": 4}))
    _publish_node_types(store, big={"CPU": 4})
    assert store.launchable_fits(R.to_fixed({"CPU": 4}))


def test_a_node_picked_for_a_lease_is_busy_before_its_next_heartbeat():
    store, clock = store_with_nodes(N1, N2, cpus=2)
    clock.advance(10)
    choice, _ = store.pick_node(R.to_fixed({"CPU": 1}), [], N1, R.to_fixed({"CPU": 0}))
    assert store.idle_s(choice.node_id) == 0  # the autoscaler sees it busy at once
    other = N2 if choice.node_id == N1 else N1
    assert store.idle_s(other) == 10


def test_a_stale_load_report_does_not_hand_out_an_actor_still_starting():
    """Two 1-CPU actors on two 1-CPU nodes: a report N1 made before the first actor's
    StartActor reached it must not send the second actor there too (it would queue forever)."""
    store, _ = store_with_nodes(N1, N2, cpus=1)
    store.register_actor(actor_spec(b"a1"), get_if_exists=False)
    store.register_actor(actor_spec(b"a2"), get_if_exists=False)
    [first] = store.place_actor(b"a1")
    store.heartbeat(first.node_id, R.to_fixed({"CPU": 1}), None, [])  # made before it knew of a1
    [second] = store.place_actor(b"a2")
    assert second.node_id != first.node_id
    # once the node answers, its own reports count the actor
    store.actor_start_replied(b"a1", first.node_id, P.StartActorReply(True, "tcp://10.0.0.1:9", b"w1", 42))
    store.heartbeat(first.node_id, R.to_fixed({"CPU": 0}), None, [])
    assert store.nodes[first.node_id].available == R.to_fixed({"CPU": 0})
    assert store.nodes[first.node_id].placing == {}
    store.actor_start_failed(b"a2", second.node_id)  # a lost StartActor leaves nothing behind
    assert store.nodes[second.node_id].placing == {}


def test_a_request_only_a_node_that_just_died_fitted_waits_for_its_replacement_for_a_while():
    store, clock = store_with_nodes(N1, cpus=0)
    store.register_node(N2, "tcp://10.0.0.2:1", "10.0.0.2", R.to_fixed({"CPU": 2}), {}, "/tmp")
    need = R.to_fixed({"CPU": 1})
    assert not store.lost_node_fitted(need)  # alive: it is simply picked
    store.node_lost(N2, "killed")
    assert isinstance(store.pick_node(need, [], N1)[0], S.Infeasible)
    assert store.lost_node_fitted(need)  # so the head waits instead of failing it
    assert not store.lost_node_fitted(R.to_fixed({"CPU": 4}))  # the dead node never fitted this
    clock.advance(CS.NODE_REPLACEMENT_WAIT_S + 1)
    assert not store.lost_node_fitted(need)  # no replacement came: now it is unschedulable
