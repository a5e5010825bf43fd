"""The node's lease table (lease_table.py) by plain calls: no sockets, no processes, a fake clock.

Each test builds a table over a worker index, feeds it events the way node.py does, and
looks at the effects it asks for and the tables it keeps."""

from __future__ import annotations

import os

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import FakeClock
from raylite._core.node import lease_table as LT
from raylite._core.node.gpu_ids import GpuIds
from raylite._core.node.worker_index import WorkerIndex, WorkerRecord
from raylite._core.strategy import SPREAD

NODE = b"n" * 28


class _Requester:
    def __init__(self, closed: bool = False) -> None:
        self.closed = closed

    def is_closed(self) -> bool:
        return self.closed


def cpus(n: float) -> dict[str, int]:
    return R.to_fixed({"CPU": n})


def _table(total: dict[str, int] | None = None, *, start_limit: int = 4, gpus: list[int] | None = None):
    index = WorkerIndex()
    clock = FakeClock()
    table = LT.LeaseTable(node_id=NODE, total=total if total is not None else cpus(2), labels={},
                          workers=index, gpus=GpuIds(gpus or []), clock=clock, start_limit=start_limit)
    return table, index, clock


def _idle_worker(index: WorkerIndex, key: str = "") -> WorkerRecord:
    rec = index.add_starting(os.urandom(8), key, now=0.0)
    rec.address = "unix:///w"
    index.set_state(rec, "IDLE")
    return rec


def _request(table: LT.LeaseTable, resources: dict[str, int], *, who: object = None, rid: int = 7,
             strategy: list | None = None, can_spill: bool = False, lease_id: bytes | None = None,
             description: str = "f"):
    msg = P.RequestLease(lease_id or os.urandom(8), resources, strategy or [], {}, description)
    p = LT.PendingLease(msg, who or _Requester(), rid, LT.worker_key({}, resources))
    return p, table.handle(LT.LeaseRequested(p, can_spill, p.cause))


def _kinds(effects: list) -> list[str]:
    return [type(e).__name__ for e in effects]


def test_a_lease_that_fits_is_granted_an_idle_worker_at_once():
    table, index, clock = _table()
    rec = _idle_worker(index)
    p, effects = _request(table, cpus(1))
    assert _kinds(effects) == ["Granted"]
    granted = effects[0]
    assert granted.lease is p and granted.worker is rec and granted.reply.worker_id == rec.worker_id and granted.reply.node_id == NODE
    assert granted.cause == LT.lease_cause(p.msg.lease_id)
    assert rec.state == "LEASED" and rec.lessee is p.conn and rec.held == cpus(1)
    assert rec.busy_since == clock.monotonic()
    assert table.available["CPU"] == cpus(1)["CPU"] and table.leases[p.msg.lease_id] is rec
    assert table.pending == [] and table.lease_events == 1


def test_a_lease_that_does_not_fit_now_waits_and_is_granted_when_one_returns():
    table, index, clock = _table(cpus(1))
    first_worker, _spare = _idle_worker(index), _idle_worker(index)
    owner = _Requester()
    first, effects = _request(table, cpus(1), who=owner)
    assert _kinds(effects) == ["Granted"]
    second, effects = _request(table, cpus(1))
    # it waits, and the lessee holding the CPU is asked to give back leases it does not use
    assert _kinds(effects) == ["AskToRelease"] and effects[0].lessees == [owner]
    assert table.pending == [second]
    # asked at most every RELEASE_ASK_INTERVAL_S
    assert table.handle(LT.Regrant("again")) == []
    clock.advance(2 * LT.RELEASE_ASK_INTERVAL_S)
    assert _kinds(table.handle(LT.Regrant("later"))) == ["AskToRelease"]

    back = table.handle(LT.LeaseReturned(first.msg.lease_id, False, first.cause))
    assert _kinds(back) == ["Granted"] and back[0].lease is second
    assert back[0].cause == first.cause  # the return set it off
    assert first_worker.state in ("IDLE", "LEASED") and table.pending == []
    assert table.available["CPU"] == 0


def test_a_lease_waits_for_a_worker_to_start_and_starts_are_bounded():
    table, index, _clock = _table(cpus(8), start_limit=2)
    effects = []
    for _ in range(3):
        asked = _request(table, cpus(1))[1]
        for e in asked:  # the shell starts them
            index.add_starting(os.urandom(8), e.key, now=0.0)
        effects += asked
    assert _kinds(effects) == ["StartWorker", "StartWorker"]  # the third waits for a start slot
    assert len(table.pending) == 3
    rec = next(r for r in index.workers.values() if r.state == "STARTING")
    index.set_state(rec, "IDLE")  # one registered
    granted = table.handle(LT.Regrant("registered"))
    assert _kinds(granted) == ["Granted", "StartWorker"] and granted[0].worker is rec


def test_a_lease_spills_back_when_this_node_is_full_and_another_may_fit():
    table, index, _clock = _table(cpus(1))
    _idle_worker(index)
    _request(table, cpus(1))
    p, effects = _request(table, cpus(1), can_spill=True)
    assert _kinds(effects) == ["SpillBack"] and effects[0].lease is p and effects[0].cause == p.cause
    assert table.free_after_queued()["CPU"] == 0 and table.pending == []
    # SPREAD always asks the head; a single node (no head to ask) queues instead
    assert _kinds(_request(table, {}, strategy=SPREAD.to_wire(), can_spill=True)[1]) == ["SpillBack"]
    local = P.RequestLease(p.msg.lease_id, p.msg.resources, [], {}, "f", allow_spillback=False)
    again = LT.PendingLease(local, p.conn, p.rid, p.key)
    assert _kinds(table.handle(LT.LeaseRequested(again, True, again.cause))) == ["AskToRelease"]
    assert table.pending == [again]


def test_a_lease_this_node_can_never_hold_is_answered_unschedulable():
    table, _index, _clock = _table(cpus(1))
    p, effects = _request(table, cpus(4), rid=3, description="big")
    assert _kinds(effects) == ["Reply"] and effects[0].rid == 3
    assert effects[0].msg.error_type == "TaskUnschedulableError" and "big cannot be scheduled" in effects[0].msg.error
    pinned = ["NODE", "ab" * 28, False]
    effects = _request(table, cpus(1), strategy=pinned)[1]
    assert "pinned to node abababab" in effects[0].msg.error and table.pending == []


def test_a_queued_lease_can_be_cancelled():
    table, _index, _clock = _table(cpus(1))
    _request(table, cpus(1), rid=5)  # starts a worker, waits for it
    p = table.pending[0]
    effects = table.handle(LT.LeaseCancelled(p.msg.lease_id, p.cause))
    assert _kinds(effects) == ["Reply"] and effects[0].rid == -5 and effects[0].msg.error_type == "Cancelled"
    assert table.pending == [] and table.handle(LT.LeaseCancelled(p.msg.lease_id, p.cause)) == []


def test_bundles_reserve_all_or_nothing_and_release_stops_their_workers():
    table, index, _clock = _table(cpus(2))
    pg = os.urandom(18)
    hexid = pg.hex()
    assert table.handle(LT.BundlesReserved(pg, [[0, cpus(2)], [1, cpus(1)]], "pg")) == []  # too big
    assert table.available == cpus(2) and table.bundles == {}
    effects = table.handle(LT.BundlesReserved(pg, [[0, cpus(1)]], "pg"))
    assert _kinds(effects) == ["ReportResources"]
    assert table.available["CPU"] == cpus(1)["CPU"]
    assert table.total[S.bundle_resource_names(hexid, 0, "CPU")] == cpus(1)["CPU"]
    assert table.available[S.bundle_resource_names(hexid, None, "CPU")] == cpus(1)["CPU"]

    rec = _idle_worker(index)
    in_group = S.bundle_request(cpus(1), hexid, 0)
    assert _kinds(_request(table, in_group)[1]) == ["Granted"]
    effects = table.handle(LT.BundlesReleased(pg, [0], "pg"))
    assert _kinds(effects) == ["KillWorker", "ReportResources"]
    assert effects[0].worker is rec and effects[0].reason == "its placement group was removed"
    assert table.total == cpus(2) and table.available == cpus(2) and table.bundles == {}


def test_a_task_may_arrive_before_its_bundle_is_reserved_here():
    """_only_group_resources_missing: a request lacking only bundle resources waits for them."""
    table, index, _clock = _table(cpus(2))
    pg = os.urandom(18)
    assert LT._only_group_resources_missing(S.bundle_request(cpus(1), pg.hex(), 0), table.total)
    assert not LT._only_group_resources_missing({**cpus(4), **S.bundle_request(cpus(1), pg.hex(), 0)}, table.total)
    p, effects = _request(table, S.bundle_request(cpus(1), pg.hex(), 0))
    assert table.pending == [p] and "Reply" not in _kinds(effects)
    _idle_worker(index)
    effects = table.handle(LT.BundlesReserved(pg, [[0, cpus(1)]], "pg"))
    assert _kinds(effects) == ["Granted", "ReportResources"] and effects[0].lease is p


def test_a_worker_blocked_in_get_lends_its_cpu_and_takes_it_back():
    """_lent: a blocked worker lends its CPU (plain or a bundle's), never its GPU."""
    assert LT._lent("CPU") and LT._lent("CPU_group_0_ab") and LT._lent("CPU_group_ab")
    assert not LT._lent("GPU") and not LT._lent("memory") and not LT._lent("GPU_group_ab")
    table, index, _clock = _table({**cpus(1), **R.to_fixed({"GPU": 1})}, gpus=[0])
    rec = _idle_worker(index, "|gpu")
    request = {**cpus(1), **R.to_fixed({"GPU": 1})}
    p, effects = _request(table, request)
    assert rec.gpu_ids == [0] and effects[0].reply.gpu_ids == [0]
    table.handle(LT.WorkerBlockedChanged(rec.worker_id, True, p.cause))
    assert table.available["CPU"] == cpus(1)["CPU"] and table.available["GPU"] == 0
    # a return while blocked gives back only what was not lent already
    table.handle(LT.LeaseReturned(p.msg.lease_id, False, p.cause))
    assert table.available == table.total and rec.state == "IDLE" and not rec.blocked
    assert table.gpus.free == {0: R.to_fixed({"GPU": 1})["GPU"]}


def test_a_requester_that_went_away_loses_its_workers_and_its_queue():
    table, index, _clock = _table(cpus(1))
    rec = _idle_worker(index)
    owner = _Requester()
    _request(table, cpus(1), who=owner)
    _request(table, cpus(1), who=owner)
    effects = table.handle(LT.RequesterGone(owner, "the task's owner exited", "client-x"))
    assert _kinds(effects) == ["KillWorker"] and effects[0].worker is rec and effects[0].flush
    assert rec.lessee is None and table.pending == []


def test_an_actor_gets_a_dedicated_worker_and_its_death_is_reported():
    table, index, _clock = _table(cpus(2))
    rec = _idle_worker(index)
    actor_id = os.urandom(16)
    p = LT.PendingLease(P.RequestLease(actor_id, cpus(1), [], {}, "actor"), _Requester(), 0, "", (actor_id, [], None))
    effects = table.handle(LT.ActorRequested(p, p.cause))
    assert _kinds(effects) == ["LaunchActor"] and rec.state == "ACTOR" and rec.actor_id == actor_id
    gone = table.handle(LT.WorkerGone(rec, "exited with code 1", p.cause))
    assert _kinds(gone) == ["ActorWorkerDied"] and gone[0].actor_id == actor_id
    assert "exited with code 1" in gone[0].reason and table.available == table.total
    assert rec.worker_id not in index.workers


def test_fencing_fails_the_queue_and_stops_every_worker():
    table, index, _clock = _table(cpus(1))
    rec = _idle_worker(index)
    _request(table, cpus(1))
    table.handle(LT.BundlesReserved(os.urandom(18), [[0, R.to_fixed({"memory": 0})]], "pg"))
    waiting, _ = _request(table, cpus(1), rid=9)
    effects = table.handle(LT.Fenced("fence"))
    assert _kinds(effects) == ["KillWorker", "Reply"] and effects[0].worker is rec
    assert effects[1].rid == -9 and effects[1].msg.error_type == "RaySystemError"
    assert table.pending == [] and table.leases == {} and table.bundles == {}
    assert table.total == cpus(1) and table.available == cpus(1)


def test_closed_requesters_are_skipped_and_a_stopped_table_grants_nothing():
    table, index, _clock = _table(cpus(2))
    _idle_worker(index)
    gone = _Requester(closed=True)
    p, effects = _request(table, cpus(1), who=gone)
    assert effects == [] and table.pending == []
    table.stopped = True
    assert _request(table, cpus(1))[1] == []


def test_a_return_whose_room_nobody_here_takes_is_reported_and_a_queued_request_can_be_withdrawn():
    table, index, _clock = _table(cpus(1))
    _idle_worker(index)
    first, effects = _request(table, cpus(1))
    assert _kinds(effects) == ["Granted"]
    second, effects = _request(table, cpus(1))
    assert table.is_pending(second.msg.lease_id)
    # the shell sends a queued request elsewhere (the head found room on another node)
    assert table.withdraw(second.msg.lease_id) and not table.is_pending(second.msg.lease_id)
    assert not table.withdraw(second.msg.lease_id)  # once only
    back = table.handle(LT.LeaseReturned(first.msg.lease_id, False, "back"))
    assert _kinds(back) == ["ReportResources"] and back[0].room_freed
    assert table.available == cpus(1)
