"""raylite.util.state.list_objects: size, owner, location and reference holders of every object."""

from __future__ import annotations

import os

import numpy as np

import raylite as ray
from raylite.util.state import format_objects, list_objects, summarize_objects

MIB = 1 << 20


def _row(ref):
    rows = [r for r in list_objects() if r.object_id == ref.hex()]
    assert rows, f"{ref.hex()} not listed"
    return rows[0]


def test_inline_and_shared_memory_objects_are_listed_with_owner_and_size(cluster):
    small = ray.put({"a": 1})
    big = ray.put(np.zeros(2 * MIB, dtype=np.uint8))
    s, b = _row(small), _row(big)
    assert s.location == "INLINE" and 0 < s.object_size < 1024
    assert b.location == "SHARED_MEMORY" and b.object_size >= 2 * MIB and b.node_id
    for row in (s, b):
        assert row.pid == os.getpid() and row.type == "DRIVER" and row["task_status"] == "FINISHED"
        assert row.reference_type == "LOCAL_REFERENCE"
        assert [h["pid"] for h in row.reference_holders] == [os.getpid()]


def test_borrowers_and_containers_are_reference_holders(cluster):
    @ray.remote
    class Holder:
        def hold(self, refs):
            self.refs = refs
            return os.getpid()

    inner = ray.put(np.ones(MIB, dtype=np.uint8))
    outer = ray.put([inner])
    holder = Holder.remote()
    actor_pid = ray.get(holder.hold.remote([inner]))
    row = _row(inner)
    by_pid = {h["pid"]: h for h in row.reference_holders}
    assert actor_pid in by_pid and not by_pid[actor_pid]["owner"] and by_pid[actor_pid]["local_refs"] >= 1
    mine = by_pid[os.getpid()]
    assert mine["owner"] and mine["captured_in_objects"] == 1 and mine["borrowers"]
    del outer


def test_summary_and_table(cluster):
    ref = ray.put(np.zeros(MIB, dtype=np.uint8))
    summary = summarize_objects()
    assert summary["total_objects"] >= 1 and summary["by_location"]["SHARED_MEMORY"]["bytes"] >= MIB
    table = format_objects(list_objects(filters=[("object_id", "=", ref.hex())]))
    assert ref.hex() in table and "SHARED_MEMORY" in table and "1 objects" in table
