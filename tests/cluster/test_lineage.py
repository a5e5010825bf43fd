"""Lineage reconstruction: a node dies holding the only copy of a task's result; get() re-runs
the task (and the tasks of lost or freed arguments first), or says why it cannot."""

from __future__ import annotations

import os

import numpy as np
import pytest

import raylite as ray
from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .conftest import wait_until


@pytest.fixture
def two_nodes(make_cluster):
    c = make_cluster()
    c.add_head(num_cpus=1)
    victim = c.add_node(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 2, what="two nodes")
    ray.init(address="auto")
    return c, victim


def _on(node) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node.node_id, soft=True)  # falls back once it is dead


@ray.remote(max_retries=2)
def make(n: int, fill: int) -> np.ndarray:
    return np.full(n, fill, dtype=np.int64)  # 1 MiB and more: kept in the node's store


@ray.remote(max_retries=2)
def add_one(a: np.ndarray) -> np.ndarray:
    return a + 1


@ray.remote(max_retries=0)
def make_once(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.int64)


def _kill(c, victim) -> None:
    c.kill_node(victim)
    wait_until(lambda: victim.node_id not in c.alive_ids(), timeout_s=10, what="the node declared dead")


def test_lost_results_are_rebuilt_recursively_or_say_why_not(two_nodes):
    c, victim = two_nodes
    first = make.options(scheduling_strategy=_on(victim)).remote(200_000, 7)
    dependent = add_one.options(scheduling_strategy=_on(victim)).remote(first)
    kept = make.options(scheduling_strategy=_on(victim)).remote(200_000, 3)
    freed_arg = make.options(scheduling_strategy=_on(victim)).remote(200_000, 5)
    uses_freed = add_one.options(scheduling_strategy=_on(victim)).remote(freed_arg)
    once = make_once.options(scheduling_strategy=_on(victim)).remote(200_000)
    passed = make.options(scheduling_strategy=_on(victim)).remote(200_000, 10)
    nested = make.options(scheduling_strategy=_on(victim)).remote(200_000, 20)
    ray.wait([dependent, kept, uses_freed, once, passed, nested], num_returns=6, timeout=60,
             fetch_local=False)
    del freed_arg  # its value is freed; its lineage stays while `uses_freed` may need it
    _kill(c, victim)

    value = ray.get(kept, timeout=60)  # re-run on the surviving node
    assert value.shape == (200_000,) and int(value[0]) == 3 and int(value[-1]) == 3
    # both were on the dead node: `first` is rebuilt before `dependent` re-runs
    assert int(ray.get(dependent, timeout=60)[0]) == 8
    assert int(ray.get(first, timeout=60)[0]) == 7
    # the argument was freed: its task runs again from the kept lineage
    assert int(ray.get(uses_freed, timeout=60)[0]) == 6
    with pytest.raises(ray.exceptions.ObjectLostError, match="max_retries=0"):
        ray.get(once, timeout=60)
    # a lost result passed to a new task is rebuilt before the task runs
    assert int(ray.get(add_one.remote(passed), timeout=60)[0]) == 11
    # a worker that borrowed a lost result (nested in a list) asks the owner, which rebuilds it

    @ray.remote
    def first_of(refs):
        return int(ray.get(refs[0])[0])

    assert ray.get(first_of.remote([nested]), timeout=60) == 20


def test_put_objects_and_dead_owners_are_not_rebuilt(two_nodes):
    c, victim = two_nodes

    @ray.remote
    class Holder:
        def put_big(self):
            return [ray.put(np.ones(200_000))]  # owned by this actor, stored on its node

    holder = Holder.options(scheduling_strategy=_on(victim)).remote()
    (borrowed,) = ray.get(holder.put_big.remote(), timeout=60)
    _kill(c, victim)
    with pytest.raises(ray.exceptions.ObjectLostError) as info:  # OwnerDiedError
        ray.get(borrowed, timeout=60)
    assert "owner" in str(info.value)


def test_put_object_whose_node_died_names_put(two_nodes):
    """The driver's own put() object, its copy on a node the driver learns is dead."""
    c, victim = two_nodes
    from raylite._core import runtime

    ref = ray.put(np.ones(200_000))
    client = runtime.client()
    entry = client.entries[ref.binary()]
    entry.payload = [bytes.fromhex(victim.node_id)] + list(entry.payload[1:])  # as if stored there
    os.unlink(os.path.join(client.store_dir, ref.hex()))  # and never copied here
    _kill(c, victim)
    wait_until(lambda: bytes.fromhex(victim.node_id) in client.links.dead_nodes, what="the driver hears of it")
    with pytest.raises(ray.exceptions.ObjectLostError, match="put"):
        ray.get(ref, timeout=60)


def test_rebuilding_stops_after_max_retries(make_cluster):
    c = make_cluster()
    c.add_head(num_cpus=0)  # the driver's node runs nothing: results live on n1, then n2
    n1, n2 = c.add_node(num_cpus=1), c.add_node(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 3, what="three nodes")
    ray.init(address="auto")

    @ray.remote(max_retries=1)
    def once_more():
        return np.full(200_000, 4), ray.get_runtime_context().get_node_id()

    first = once_more.options(scheduling_strategy=_on(n1), num_returns=2).remote()
    assert ray.get(first[1], timeout=60) == n1.node_id
    ray.wait([first[0]], timeout=60, fetch_local=False)
    _kill(c, n1)

    @ray.remote
    def head_of(a):
        return int(a[0])

    # passed to a task (on n2): re-run once there first, and read there (no copy reaches the driver)
    assert ray.get(head_of.remote(first[0]), timeout=60) == 4
    assert ray.get(first[1], timeout=60) == n1.node_id  # a small return kept by the owner stays
    _kill(c, n2)
    with pytest.raises(ray.exceptions.ObjectReconstructionFailedMaxAttemptsExceededError,
                       match="max_retries"):
        ray.get(first[0], timeout=60)


def test_a_cancelled_finished_task_is_not_rebuilt(two_nodes):
    # Ray's semantics: ray.cancel() of a task that already finished leaves its result readable,
    # but once that result is lost, the task is not re-run to rebuild it
    c, victim = two_nodes
    cancelled = make.options(scheduling_strategy=_on(victim)).remote(200_000, 1)
    kept = make.options(scheduling_strategy=_on(victim)).remote(200_000, 2)
    ray.wait([cancelled, kept], num_returns=2, timeout=60, fetch_local=False)
    ray.cancel(cancelled)  # finished already: nothing to stop (a get here would copy it to the head)
    _kill(c, victim)

    with pytest.raises(ray.exceptions.ObjectReconstructionFailedError, match=r"was cancelled \(ray.cancel\)"):
        ray.get(cancelled, timeout=60)

    @ray.remote
    def first_of(refs):
        return ray.get(refs[0])

    # a borrower asking the owner gets the same answer
    with pytest.raises(ray.exceptions.ObjectReconstructionFailedError, match="was cancelled"):
        ray.get(first_of.remote([cancelled]), timeout=60)
    assert int(ray.get(kept, timeout=60)[0]) == 2  # the task not cancelled is rebuilt


@ray.remote(num_returns="dynamic", max_retries=2)
def numbered(n: int):
    for i in range(n):
        yield np.full(200_000, i, dtype=np.int64)  # stored in the node's store, not inline


def test_a_dynamic_generators_lost_items_are_rebuilt_by_running_it_again(two_nodes):
    c, victim = two_nodes
    items = list(ray.get(numbered.options(scheduling_strategy=_on(victim)).remote(4), timeout=60))
    _kill(c, victim)

    # the same refs get the re-run's values (the survivor runs it); no new list is made
    assert [int(ray.get(r, timeout=60)[0]) for r in items] == [0, 1, 2, 3]

    @ray.remote
    def first_of(refs):
        return int(ray.get(refs[0])[0])

    assert ray.get(first_of.remote([items[2]]), timeout=60) == 2  # a borrower reads it too


@ray.remote
class RunCounter:
    def __init__(self):
        self.runs = 0

    def next_run(self) -> int:
        self.runs += 1
        return self.runs


@ray.remote(num_returns="dynamic", max_retries=2)
def fewer_when_rerun(counter):
    n = 4 if ray.get(counter.next_run.remote()) == 1 else 2
    for i in range(n):
        yield np.full(200_000, i, dtype=np.int64)


@ray.remote(num_returns="dynamic", max_retries=1)
def crashes_when_rerun(counter):
    again = ray.get(counter.next_run.remote()) > 1
    for i in range(4):
        yield np.full(200_000, i, dtype=np.int64)
        if again and i == 1:
            os._exit(3)


@pytest.mark.parametrize("make_gen, error, match", [
    (fewer_when_rerun, ray.exceptions.ObjectReconstructionFailedError, "yielded 2 values where its first run yielded 4"),
    (crashes_when_rerun, ray.exceptions.WorkerCrashedError, "exited with code 3"),
])
def test_items_a_rerun_does_not_make_again_say_why(two_nodes, make_gen, error, match):
    c, victim = two_nodes
    counter = RunCounter.options(num_cpus=0).remote()
    items = list(ray.get(make_gen.options(scheduling_strategy=_on(victim)).remote(counter), timeout=60))
    assert len(items) == 4
    _kill(c, victim)

    # the re-run makes the first two again (a crash may cut off the value it yielded last,
    # which then carries the crash); the others carry the reason (never a hang)
    for i, r in enumerate(items[:2]):
        try:
            assert int(ray.get(r, timeout=60)[0]) == i
        except error as e:
            assert make_gen is crashes_when_rerun and match in str(e)
    for r in items[2:]:
        with pytest.raises(error, match=match):
            ray.get(r, timeout=60)


@ray.remote(max_retries=2)
def streamed(n: int):
    for i in range(n):
        yield np.full(200_000, i, dtype=np.int64)


def test_a_streaming_generators_lost_items_are_rebuilt_while_its_consumer_reads_on(two_nodes):
    c, victim = two_nodes
    gen = streamed.options(scheduling_strategy=_on(victim)).remote(4)
    first = next(gen)
    ray.get(gen.completed(), timeout=60)  # every item made, on the victim's store
    _kill(c, victim)

    # the refs already out and those still to be read get the re-run's values (on the survivor)
    rest = list(gen)
    assert [int(ray.get(r, timeout=60)[0]) for r in [first, *rest]] == [0, 1, 2, 3]


@ray.remote(num_cpus=0)
class Hold:
    def __init__(self):
        self.released = False

    def release(self):
        self.released = True

    def is_released(self):
        return self.released


@ray.remote(max_retries=2)
def streamed_after(hold, n: int):
    import time

    for i in range(n):
        yield np.full(200_000, i, dtype=np.int64)
        while i == 0 and not ray.get(hold.is_released.remote()):
            time.sleep(0.02)


def test_a_task_retried_after_its_node_died_waits_for_a_node_that_fits(make_cluster):
    """The only node with a CPU dies while a generator runs there: its retry is unschedulable
    for the moment, and waits (a replacement may be starting) instead of failing at once."""
    c = make_cluster()
    c.add_head(num_cpus=0)
    victim = c.add_node(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 2, what="two nodes")
    ray.init(address="auto")
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    hold = Hold.options(scheduling_strategy=here).remote()  # on the head: it survives
    gen = streamed_after.remote(hold, 3)
    first = next(gen)  # it runs on the victim, held after its first item
    _kill(c, victim)
    c.add_node(num_cpus=1)  # the replacement joins after the retry found no node
    ray.get(hold.release.remote())
    assert [int(ray.get(r, timeout=60)[0]) for r in [first, *gen]] == [0, 1, 2]
