"""A deployment whose replica set is not published yet is starting, not deleted (issue 22):
the first request during `serve run` start-up waits for it, and says so if it never comes."""

import asyncio

import pytest

from raylite.experimental import ChannelSecurity
from raylite.serve._internal import router as R
from raylite.serve.exceptions import DeploymentUnavailableError

_SECURITY = ChannelSecurity(token=b"t" * 32, socket_dir="/nonexistent")  # never connects
REPLICAS = {"replicas": [{"replica_id": "r1"}], "max_ongoing_requests": 5}


def test_request_before_the_first_replica_set_waits_for_it():
    async def scenario():
        router = R.Router("app", "Echo", R.ConnectionPool("n", _SECURITY))
        router.update(None)  # the controller has not published this deployment yet
        pending = asyncio.ensure_future(router._assign(""))
        await asyncio.sleep(0.05)
        assert not pending.done()
        router.update(REPLICAS)
        return await asyncio.wait_for(pending, 5)

    assert asyncio.run(scenario())["replica_id"] == "r1"


def test_deleted_after_being_seen_is_still_deleted():
    async def scenario():
        router = R.Router("app", "Echo", R.ConnectionPool("n", _SECURITY))
        router.update(REPLICAS)
        router.update(None)
        return await router._assign("")

    with pytest.raises(DeploymentUnavailableError, match=r"does not exist \(deleted\?\)"):
        asyncio.run(scenario())


def test_never_published_says_starting_or_missing(monkeypatch):
    monkeypatch.setattr(R, "STARTING_WAIT_S", 0.1)

    async def scenario():
        router = R.Router("app", "Echo", R.ConnectionPool("n", _SECURITY))
        router.update(None)
        return await router._assign("")

    with pytest.raises(DeploymentUnavailableError, match=r"'Echo' of app 'app' has no replicas yet.*still starting"):
        asyncio.run(scenario())
