"""One task's lease can be followed through the node's log: its lines carry the lease's cause id."""

from __future__ import annotations

import asyncio
import logging

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core.node.lease_table import lease_cause
from tests.unit.test_killed_worker_not_reused import _Owner, _registered_worker
from tests.unit.test_worker_starts import _node


def test_a_leases_grant_and_return_log_the_same_cause_id(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="raylite.node")

    async def scenario() -> None:
        node = _node(tmp_path, limit=4)
        worker = _registered_worker(node)
        owner = _Owner()
        node._on_request_lease(owner, P.RequestLease(b"lease-7", R.to_fixed({"CPU": 1}), [], {}, "my_task"), 1)
        assert worker.state == "LEASED"
        assert isinstance(owner.sent[0], P.RequestLeaseReply) and owner.sent[0].worker_id == worker.worker_id
        node._on_return_lease(owner, P.ReturnLease(b"lease-7"), 0)
        assert worker.state == "IDLE"

    asyncio.run(scenario())
    cause = lease_cause(b"lease-7")
    lines = [r.getMessage() for r in caplog.records if r.name == "raylite.node"]
    ours = [line for line in lines if f"[{cause}]" in line]
    assert any("Granted" in line and "my_task" in line for line in ours), lines
    assert any("LeaseReturned" in line for line in ours), lines
    assert any("LeaseRequested" in line for line in ours), lines
