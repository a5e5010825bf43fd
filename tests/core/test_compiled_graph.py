"""Compiled graphs (`dag.experimental_compile()`): Ray's API and semantics on raylite."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal

import pytest

import raylite as ray
from raylite.dag import InputNode, MultiOutputNode
from raylite.exceptions import ActorDiedError, RayActorError


@ray.remote
class Worker:
    def __init__(self):
        self.calls = 0

    def echo(self, x):
        self.calls += 1
        return x

    def inc(self, x, by=1):
        return x + by

    def add(self, x, y):
        return x + y

    def fail_on(self, x, bad):
        if x == bad:
            raise ValueError(f"bad input {x}")
        return x

    def count(self):
        return self.calls

    def pid(self):
        return os.getpid()


@ray.remote
class AsyncWorker:
    async def double(self, x):
        await asyncio.sleep(0)
        return 2 * x


@ray.remote
def plain(x):
    return x


def test_chain_runs_many_executions_in_order(cluster):
    a, b = Worker.remote(), Worker.remote()
    with InputNode() as inp:
        dag = b.inc.bind(a.inc.bind(inp), by=10)
    compiled = dag.experimental_compile()
    try:
        assert ray.get(compiled.execute(1), timeout=30) == 12
        refs = [compiled.execute(i) for i in range(8)]  # several in flight before any get
        assert [ray.get(r, timeout=30) for r in refs] == [i + 11 for i in range(8)]
    finally:
        compiled.teardown()


def test_multi_output_and_input_parts(cluster):
    a, b = Worker.remote(), Worker.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([a.echo.bind(inp[0]), b.add.bind(inp.y, 100), a.add.bind(inp[0], inp.y)])
    compiled = dag.experimental_compile()
    try:
        assert ray.get(compiled.execute(5, y=7), timeout=30) == [5, 107, 12]
    finally:
        compiled.teardown()


def test_user_error_is_raised_and_the_graph_keeps_working(cluster):
    a, b = Worker.remote(), Worker.remote()
    with InputNode() as inp:
        dag = b.inc.bind(a.fail_on.bind(inp, 3))  # b depends on the call that raises
    compiled = dag.experimental_compile()
    try:
        assert ray.get(compiled.execute(1), timeout=30) == 2
        with pytest.raises(ValueError, match="bad input 3"):
            ray.get(compiled.execute(3), timeout=30)
        assert ray.get(compiled.execute(4), timeout=30) == 5
    finally:
        compiled.teardown()


def test_asyncio_execution(cluster):
    a, b = AsyncWorker.remote(), Worker.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([a.double.bind(inp), b.inc.bind(inp)])
    compiled = dag.experimental_compile(enable_asyncio=True)

    async def main():
        futures = await compiled.execute_async(21)
        return [await f for f in futures]

    try:
        assert asyncio.run(main()) == [42, 22]
    finally:
        compiled.teardown()


def _three_echoes_compiled():
    """(actors, their pids, the compiled graph): three Workers echoing the input, run once."""
    actors = [Worker.remote() for _ in range(3)]
    pids = ray.get([w.pid.remote() for w in actors], timeout=30)
    with InputNode() as inp:
        dag = MultiOutputNode([w.echo.bind(inp) for w in actors])
    compiled = dag.experimental_compile()
    assert ray.get(compiled.execute(1), timeout=30) == [1, 1, 1]
    return actors, pids, compiled


def test_a_death_noticed_while_sending_input_raises_actor_died(cluster, monkeypatch):
    """The driver sees the dead actor's channel close while it is still sending an execution's
    input, and the break leaves bytes queued for the others (their stop not taken within the
    grace, as on a loaded machine): get() of the execution raises ActorDiedError, not a selector
    error; execute() itself returns (Ray's documented behaviour)."""
    import select

    from raylite.dag import compiled_dag_node

    monkeypatch.setattr(compiled_dag_node, "BREAK_GRACE_S", 0.0)
    actors, pids, compiled = _three_echoes_compiled()
    dead = next(key for key, handle in compiled._actors.items() if handle is actors[0])
    os.kill(pids[0], signal.SIGKILL)
    sock = compiled._endpoints[dead].sock
    assert select.select([sock], [], [], 30)[0]  # its end of the channel is closed (EOF waiting)
    with pytest.raises(ActorDiedError):
        ray.get(compiled.execute(2), timeout=30)
    with pytest.raises(ActorDiedError):  # and stays broken, with the same error
        ray.get(compiled.execute(3), timeout=30)


def test_after_killing_an_actor_execute_returns_and_get_raises(cluster):
    """Ray's documented behaviour after ray.kill(actor): compiled_dag.execute(...) returns a
    ref, ray.get on it raises ActorDiedError; the graph stays torn down."""
    actors, pids, compiled = _three_echoes_compiled()
    assert ray.get(compiled.execute(1), timeout=30) == [1, 1, 1]
    ray.kill(actors[0])
    for _ in range(2):
        refs = compiled.execute(5)
        with pytest.raises(ActorDiedError):
            ray.get(refs, timeout=30)


def test_dead_actor_raises_actor_died_and_frees_the_others(cluster):
    actors, pids, compiled = _three_echoes_compiled()
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        ray.get(compiled.execute(2), timeout=30)
    for w in actors[1:]:
        assert ray.get(w.echo.remote("ping"), timeout=30) == "ping"
    with pytest.raises(RayActorError):
        ray.get(actors[0].echo.remote("ping"), timeout=30)
    # the survivors are free to join a new compiled graph
    with InputNode() as inp:
        again = MultiOutputNode([w.echo.bind(inp) for w in actors[1:]]).experimental_compile()
    try:
        assert ray.get(again.execute("x"), timeout=30) == ["x", "x"]
    finally:
        again.teardown()


def test_teardown_frees_the_actor_and_one_graph_per_actor(cluster):
    a = Worker.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    first = dag.experimental_compile()
    with pytest.raises(ValueError, match="already takes part in a compiled graph"):
        dag.experimental_compile()
    assert ray.get(first.execute("one"), timeout=30) == "one"
    first.teardown()
    second = dag.experimental_compile()
    try:
        assert ray.get(second.execute("two"), timeout=30) == "two"
    finally:
        second.teardown()
    with pytest.raises(ray.exceptions.RayChannelError):
        first.execute("after teardown")


def test_actor_answers_ordinary_calls_while_compiled(cluster):
    a = Worker.remote()
    with InputNode() as inp:
        compiled = a.echo.bind(inp).experimental_compile()
    try:
        for i in range(3):
            assert ray.get(compiled.execute(i), timeout=30) == i
        assert ray.get(a.count.remote(), timeout=30) == 3
    finally:
        compiled.teardown()


def test_compiled_ref_semantics(cluster):
    a = Worker.remote()
    with InputNode() as inp:
        compiled = a.echo.bind(inp).experimental_compile()
    try:
        ref = compiled.execute("v")
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(ref)
        assert ray.get(ref, timeout=30) == "v"
        with pytest.raises(ValueError, match="only once"):
            ray.get(ref)
        del ref
        dropped = compiled.execute("dropped")  # a result nobody reads is discarded
        del dropped
        assert ray.get(compiled.execute("next"), timeout=30) == "next"
    finally:
        compiled.teardown()


def test_what_does_not_compile_says_why(cluster):
    with InputNode() as inp:
        task_dag = plain.bind(inp)
    with pytest.raises(TypeError, match="actor method call"):
        task_dag.experimental_compile()
    with InputNode() as inp:
        created_in_dag = Worker.bind().echo.bind(inp)
    with pytest.raises(TypeError, match="created with .remote"):
        created_in_dag.experimental_compile()
