"""A replica a router could not connect to stays out of its choice while the controller keeps
listing it (the controller learns of a death later than a refused connect), so a request's
retries go to other replicas instead of the same dead one again; after UNREACHABLE_S it is
tried again (a live replica may refuse one connect under a flood)."""

import asyncio

from raylite.experimental import ChannelSecurity
from raylite.serve._internal import router as R

_SECURITY = ChannelSecurity(token=b"t" * 32, socket_dir="/nonexistent")
SET = {"replicas": [{"replica_id": "dead"}, {"replica_id": "live"}], "max_ongoing_requests": 5}


def _router() -> R.Router:
    router = R.Router("app", "Echo", R.ConnectionPool("n", _SECURITY))
    router.update(SET)
    return router


def test_a_replica_that_refused_a_connect_is_not_re_added_by_a_stale_set():
    router = _router()
    router._drop("dead")
    router.update(SET)  # the controller has not noticed yet
    assert [r["replica_id"] for r in router.replicas] == ["live"]
    assert all(router._pick()["replica_id"] == "live" for _ in range(20))


def test_it_is_tried_again_after_unreachable_s_and_forgotten_once_unlisted(monkeypatch):
    router = _router()
    router._drop("dead")
    clock = [R.time.monotonic() + R.UNREACHABLE_S + 1]
    monkeypatch.setattr(R.time, "monotonic", lambda: clock[0])
    router.update(SET)
    assert {r["replica_id"] for r in router.replicas} == {"dead", "live"}
    router._drop("dead")
    router.update({"replicas": [{"replica_id": "live"}], "max_ongoing_requests": 5})
    assert router.unreachable == {}  # the controller dropped it: nothing left to remember


def test_a_request_skips_every_dead_replica_the_set_still_lists():
    """Five listed replicas of which four are gone: the request lands on the live one although
    it has only three retries, because each refused replica leaves the set for good."""
    async def scenario():
        pool = R.ConnectionPool("n", _SECURITY)
        router = R.Router("app", "Echo", pool)
        live = R.Connection("live", pool)

        async def get(info):
            if info["replica_id"] != "live":
                raise R.ReplicaDiedError(f"cannot reach replica {info['replica_id']}")
            router.update(many)  # a stale republish arrives mid-request
            return live

        pool.get = get
        many = {"replicas": [{"replica_id": f"d{i}"} for i in range(4)] + [{"replica_id": "live"}],
                "max_ongoing_requests": 5}
        router.update(many)
        sent = []
        router._send_on = lambda conn, rid, *a: sent.append(rid) or (conn, 1)
        await router.send(R.KIND_CALL, (), b"", None)
        return sent

    for _ in range(10):
        assert asyncio.run(scenario()) == ["live"]
