"""Ids are unique without a system call each: within a process and across forks."""

from __future__ import annotations

import os

from raylite._core.ids import ObjectID, TaskID, WorkerID


def test_ids_are_unique_and_short_prefixes_differ():
    ids = [TaskID.from_random() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert len({i.hex()[:16] for i in ids}) == len(ids)  # socket names use a hex prefix
    puts = [ObjectID.for_put() for _ in range(1000)]
    assert len(set(puts)) == len(puts) and all(p.return_index() == 0xFFFFFFFF for p in puts)


def test_forked_children_do_not_repeat_the_parents_ids():
    before = WorkerID.from_random()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b"".join(WorkerID.from_random() for _ in range(100)))
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    child = {data[i:i + 16] for i in range(0, len(data), 16)}
    parent = {WorkerID.from_random() for _ in range(100)} | {before}
    assert len(child) == 100 and not child & parent
