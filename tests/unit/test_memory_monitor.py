"""The memory monitor's policy: parse memory use, decide when, choose whom to kill."""

from __future__ import annotations

from raylite._core.node import memory_monitor as MM

GIB = 1 << 30

MEMINFO = """MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:    4000000 kB
Buffers:          100000 kB
"""


def test_used_memory_is_total_minus_available():
    snap = MM.parse_meminfo(MEMINFO)
    assert snap.total_bytes == 16000000 * 1024
    assert snap.used_bytes == 12000000 * 1024
    assert abs(snap.fraction - 0.75) < 1e-9


def test_a_container_limit_below_ram_is_what_counts():
    host = MM.MemorySnapshot(10 * GIB, 64 * GIB)
    assert MM.apply_cgroup_limit(host, 8 * GIB, 7 * GIB) == MM.MemorySnapshot(7 * GIB, 8 * GIB)
    assert MM.apply_cgroup_limit(host, None, None) == host
    assert MM.apply_cgroup_limit(host, 128 * GIB, 7 * GIB) == host


def test_threshold():
    assert MM.over_threshold(MM.MemorySnapshot(96, 100), 0.95)
    assert not MM.over_threshold(MM.MemorySnapshot(95, 100), 0.95)
    assert not MM.over_threshold(MM.MemorySnapshot(0, 0), 0.95)


def test_newest_retriable_task_dies_first():
    # tasks started at t=1, 5, 9 and an actor at t=0: the task from t=9 goes
    cands = [MM.Candidate(b"a", 1, "", 1.0), MM.Candidate(b"b", 2, "", 5.0), MM.Candidate(b"c", 3, "", 9.0),
             MM.Candidate(b"actor", 4, "", 0.0, is_actor=True, retriable=False)]
    assert MM.choose_victim(cands).worker_id == b"c"


def test_retriable_before_non_retriable_and_tasks_before_actors():
    old_retriable = MM.Candidate(b"r", 1, "", 1.0)
    new_final = MM.Candidate(b"f", 2, "", 9.0, retriable=False)
    new_actor = MM.Candidate(b"x", 3, "", 10.0, is_actor=True, retriable=True)
    assert MM.choose_victim([new_final, old_retriable, new_actor]).worker_id == b"r"
    assert MM.choose_victim([new_final, new_actor]).worker_id == b"f"
    assert MM.choose_victim([new_actor]).worker_id == b"x"
    assert MM.choose_victim([]) is None


def test_reason_names_memory_use_and_the_fix():
    text = MM.oom_reason(MM.MemorySnapshot(15 * GIB, 16 * GIB), 0.9, "10.0.0.7")
    assert "10.0.0.7" in text and "15.00 GiB of 16.00 GiB (94%)" in text and "90%" in text
    assert "fewer tasks" in text and "memory=" in text
