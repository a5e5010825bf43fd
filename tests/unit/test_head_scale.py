"""Pure parts of the head that must stay cheap at thousands of nodes."""

from __future__ import annotations

from raylite._core.head.timeseries import TimeSeriesStore


def test_history_keeps_a_stable_set_when_a_sample_has_more_series_than_fit():
    """Per-node series of a big cluster outnumber max_series: each sample used to evict, with a
    scan of every series, the stalest one per newcomer (all of them, every 5 s); now the kept
    set stays and the newcomers wait for room."""
    ts = TimeSeriesStore(capacity=4, max_series=3)
    sample = {f"node{i}": float(i) for i in range(5)}
    ts.add(sample, t=1)
    kept = ts.names()
    assert len(kept) == 3
    ts.add(sample, t=2)
    assert ts.names() == kept
    assert ts.query(kept)[kept[0]] == [sample[kept[0]]] * 2
    # a series absent from a sample gives its room to a newcomer
    ts.add({**{k: 1.0 for k in kept[1:]}, "late": 9.0}, t=3)
    assert "late" in ts.names() and kept[0] not in ts.names()


def _store(n: int, timeout_s: float = 5.0):
    from raylite._core import resources as R
    from raylite._core.clock import FakeClock
    from raylite._core.head.control_store import ControlStore

    clock = FakeClock()
    store = ControlStore(clock, node_dead_timeout_s=timeout_s)
    ids = [i.to_bytes(2, "big") * 8 for i in range(n)]
    for nid in ids:
        assert store.register_node(nid, "tcp://10.0.0.1:1", "10.0.0.1", R.to_fixed({"CPU": 2}), {}, "/s")[0] == ""
    return store, clock, ids


def test_a_late_loop_delays_expiry_by_its_lateness_only():
    from raylite._core.head import control_store as CS

    store, clock, ids = _store(3)
    clock.advance(4.0)
    store.excuse_stall(3.0)  # heartbeats of 3 s may be unread: 3 s more for everyone
    clock.advance(3.5)
    assert store.expire_silent_nodes() == []
    clock.advance(0.6)  # 8.1 s silent, 3 s excused: past the 5 s timeout
    dead = {e.node_id for e in store.expire_silent_nodes() if isinstance(e, CS.MarkNodeDead)}
    assert dead == set(ids)


def test_a_dead_node_restarts_only_its_own_actors():
    from raylite._core import protocol as P
    from raylite._core import resources as R
    from raylite._core.head import control_store as CS
    from raylite._core.task_spec import KIND_ACTOR_CREATE, FunctionDescriptor, TaskSpec

    store, _clock, ids = _store(4)
    placed = {}
    for i in range(8):
        aid = bytes([i + 1]) * 16
        spec = TaskSpec(task_id=b"t" * 16, job_id=b"j" * 4, kind=KIND_ACTOR_CREATE,
                        function=FunctionDescriptor("m", "A", b"f"), args=[], arg_refs=[], num_returns=1,
                        owner_address="", owner_worker_id=b"o", resources=R.to_fixed({"CPU": 1}),
                        actor_id=aid, max_restarts=1)
        store.register_actor(spec, False)
        [start] = store.place_actor(aid)
        store.actor_start_replied(aid, start.node_id, P.StartActorReply(True, "addr", b"w", 1))
        placed[aid] = start.node_id
    victim = ids[0]
    effects = store.node_lost(victim, "test")
    restarted = {e.actor_id for e in effects if isinstance(e, CS.ScheduleActor)}
    assert restarted == {a for a, n in placed.items() if n == victim} and restarted
    assert all(store.actors[a].state is CS.ActorState.ALIVE for a in placed if a not in restarted)
