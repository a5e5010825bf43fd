"""Core API through ray:// (client_remote.py -> client server -> proxy driver): tasks, actors,
objects, errors, and what a connection leaves behind when it ends."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import cloudpickle
import numpy as np
import pytest

from tests.cluster.conftest import wait_until

from .conftest import proxy_pids

# the proxy driver cannot import this module by name: ship its classes and functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class InsufficientFunds(Exception):
    pass


def test_tasks_and_wait(ray_client):
    ray = ray_client

    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    def add(a, b):
        return a + b

    refs = [square.remote(i) for i in range(20)]
    assert ray.get(refs) == [i * i for i in range(20)]
    assert ray.get(add.remote(square.remote(3), b=square.remote(4))) == 25  # refs as arguments
    nested = [square.remote(5)]

    @ray.remote
    def first_of(lst):
        return ray.get(lst[0]) + 1

    assert ray.get(first_of.remote(nested)) == 26  # a ref inside an argument

    @ray.remote
    def slow(s):
        import time

        time.sleep(s)
        return s

    fast, late = slow.remote(0), slow.remote(30)
    ready, not_ready = ray.wait([late, fast], num_returns=1, timeout=20)
    assert ready == [fast] and not_ready == [late]
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(late, timeout=0.2)
    ray.cancel(late, force=True)
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
        ray.get(late, timeout=30)

    @ray.remote(num_returns=3)
    def three():
        return 1, 2, 3

    assert ray.get(three.remote()) == [1, 2, 3]

    @ray.remote
    def gen(n):
        for i in range(n):
            yield i * 10

    assert [ray.get(r) for r in gen.remote(4)] == [0, 10, 20, 30]


def test_large_numpy_objects(ray_client):
    ray = ray_client
    arr = np.arange(6_000_000, dtype=np.float64)  # 48 MB: through the store, not inline
    ref = ray.put(arr)
    back = ray.get(ref)
    assert back.shape == arr.shape and np.array_equal(back, arr)

    @ray.remote
    def total(x):
        return float(x.sum())

    @ray.remote
    def make(n):
        return np.ones(n, dtype=np.float32)

    assert ray.get(total.remote(ref)) == float(arr.sum())
    assert ray.get(total.remote(arr)) == float(arr.sum())  # a large argument, by value
    big = ray.get(make.remote(10_000_000))
    assert big.dtype == np.float32 and big.shape == (10_000_000,) and float(big.sum()) == 1e7
    inner = ray.put(np.zeros(3))
    outer = ray.get(ray.put({"inner": inner}))  # a ref inside a value comes back usable
    assert np.array_equal(ray.get(outer["inner"]), np.zeros(3))


def test_errors_keep_their_types(ray_client):
    ray = ray_client

    @ray.remote
    def fails():
        raise ValueError("bad value 42")

    @ray.remote
    def broke():
        raise InsufficientFunds("need 10")

    with pytest.raises(ValueError, match="bad value 42") as info:
        ray.get(fails.remote())
    assert isinstance(info.value, ray.exceptions.RayTaskError)
    with pytest.raises(InsufficientFunds, match="need 10"):
        ray.get(broke.remote())

    @ray.remote
    class Account:
        def withdraw(self, n):
            raise InsufficientFunds(f"balance 0 < {n}")

    with pytest.raises(InsufficientFunds, match="balance 0 < 5"):
        ray.get(Account.remote().withdraw.remote(5))


def test_actors_named_detached_async(ray_client):
    ray = ray_client

    @ray.remote
    class Counter:
        def __init__(self, start):
            self.n = start

        def add(self, k):
            self.n += k
            return self.n

    c = Counter.remote(10)
    assert [ray.get(c.add.remote(1)) for _ in range(3)] == [11, 12, 13]
    named = Counter.options(name="counter-a").remote(0)
    ray.get(named.add.remote(5))
    assert ray.get(ray.get_actor("counter-a").add.remote(1)) == 6
    assert "counter-a" in ray.util.list_named_actors()

    @ray.remote
    class AsyncWorker:
        async def work(self, x):
            await asyncio.sleep(0.01)
            return x * 2

    a = AsyncWorker.remote()
    assert ray.get([a.work.remote(i) for i in range(10)]) == [i * 2 for i in range(10)]

    @ray.remote
    def use(handle):
        return ray.get(handle.add.remote(100))

    assert ray.get(use.remote(c)) == 113  # a handle passed to a task
    ray.kill(named)
    wait_until(lambda: _gone(ray, "counter-a"), 30, "the killed actor's name to be released")
    ctx = ray.get_runtime_context()
    assert ctx.namespace == "client-tests" and len(ctx.get_job_id()) == 8
    assert ray.cluster_resources()["CPU"] == 4.0 and len(ray.nodes()) == 1


def _gone(ray, name: str, namespace: str | None = None) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_worker_output_reaches_the_client(ray_client, capfd):
    ray = ray_client

    @ray.remote
    def shout():
        print("hello from the cluster")
        return 1

    ray.get(shout.remote())
    seen: list[str] = []  # readouterr() hands each piece out once: keep them all, a line may come in two

    def arrived() -> bool:
        seen.append(capfd.readouterr().out)
        return "hello from the cluster" in "".join(seen)

    wait_until(arrived, 20, "the worker's line")


def test_disconnect_cleans_up_and_init_again(client_head):
    import raylite as ray

    ray.init(client_head["url"], namespace="cleanup")

    @ray.remote
    class Holder:
        def ping(self):
            return "pong"

    temp = Holder.options(name="temp").remote()
    keep = Holder.options(name="keep", lifetime="detached").remote()
    assert ray.get([temp.ping.remote(), keep.ping.remote()]) == ["pong", "pong"]
    big = ray.put(np.ones(2_000_000))  # 16 MB: in the head node's store, owned by the proxy
    assert big.binary() in _stored_ids()
    proxies = proxy_pids(client_head["head"].pid)
    assert len(proxies) == 1
    ray.shutdown()
    assert not ray.is_initialized()
    wait_until(lambda: not proxy_pids(client_head["head"].pid), 30, "the proxy driver to exit")
    ray.init(client_head["url"], namespace="cleanup")  # a second time: a new proxy, a new job
    try:
        assert ray.get(ray.get_actor("keep").ping.remote()) == "pong"  # detached: still there
        wait_until(lambda: _gone(ray, "temp"), 30, "the job's non-detached actor to go")
        wait_until(lambda: big.binary() not in _stored_ids(), 30, "the job's object to be freed")
        ray.kill(ray.get_actor("keep"))
    finally:
        ray.shutdown()


def _stored_ids() -> set[bytes]:
    """Ids of the objects in the (one) node's store, asked through the connected program."""
    from raylite._core import protocol as P
    from raylite._core import runtime

    return {o[0] for o in runtime.client().node_request(P.GetNodeInfo()).objects}


def test_a_killed_client_leaves_nothing_behind(client_head):
    """The remote program dies (SIGKILL): its proxy sees the connection go and ends the job."""
    program = textwrap.dedent(f"""
        import sys, time
        import raylite as ray
        ray.init({client_head['url']!r}, namespace="killed")

        @ray.remote
        class Holder:
            def ping(self):
                return "pong"

        h = Holder.options(name="orphan").remote()
        ray.get(h.ping.remote())
        print("READY", flush=True)
        time.sleep(600)
    """)
    env = dict(os.environ, RAYLITE_TOKEN=client_head["token"], RAYLITE_TEMP_DIR=client_head["temp_dir"],
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"READY"
        assert len(proxy_pids(client_head["head"].pid)) == 1
        proc.kill()
        proc.wait(10)
        wait_until(lambda: not proxy_pids(client_head["head"].pid), 30, "the proxy driver to exit")
        import raylite as ray

        ray.init(client_head["url"], namespace="killed")
        try:
            wait_until(lambda: _gone(ray, "orphan"), 30, "the dead client's actor to go")
        finally:
            ray.shutdown()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_dropped_refs_free_their_objects(ray_client):
    """The program's last ref to an id goes -> its grants go back -> the proxy drops its ref."""
    ray = ray_client

    @ray.remote
    def make():
        return np.ones(200_000)  # 1.6 MB: a stored task return

    ids = []
    for _ in range(10):
        r = ray.put(np.ones(200_000))
        t = make.remote()
        ray.get(t)
        ids += [r.binary(), t.binary()]
        del r, t
    wait_until(lambda: not (set(ids) & _stored_ids()), 30, "the dropped objects to be freed")


def test_working_dir_ships_the_programs_own_modules(client_head, tmp_path):
    """A module only the program's machine has reaches the workers through runtime_env."""
    import raylite as ray

    (tmp_path / "laptop_only_mod.py").write_text("def greet(name):\n    return f'hi {name}'\n")
    ray.init(client_head["url"], runtime_env={"working_dir": str(tmp_path)})
    try:
        @ray.remote
        def use():
            import laptop_only_mod

            return laptop_only_mod.greet("cluster")

        assert ray.get(use.remote()) == "hi cluster"
    finally:
        ray.shutdown()


def test_streaming_generators_with_wait_and_async(ray_client):
    ray = ray_client

    @ray.remote(num_returns="streaming")
    def counting(n):
        yield from range(n)

    gen = counting.remote(3)
    ready, _ = ray.wait([gen], num_returns=1, timeout=30)  # a generator is ready when an item is
    assert ready == [gen]
    assert [ray.get(r) for r in gen] == [0, 1, 2]
    assert ray.get(gen.completed(), timeout=30) is None  # the task has returned

    @ray.remote
    def fails_midway():
        yield 1
        raise KeyError("midway")

    it = fails_midway.options(num_returns="streaming").remote()
    assert ray.get(next(it)) == 1
    with pytest.raises(KeyError, match="midway"):
        ray.get(next(it))

    @ray.remote
    def value():
        return 7

    async def main():
        return await value.remote()

    assert asyncio.run(main()) == 7  # `await ref` in the program


def test_two_programs_at_once(ray_client, client_head):
    """Each connection has its own proxy and job: a second program comes and goes while the
    first keeps working, and finds the first's named actor in a shared namespace."""
    ray = ray_client

    @ray.remote
    class Box:
        def get(self):
            return "boxed"

    box = Box.options(name="shared-box", namespace="shared").remote()
    assert ray.get(box.get.remote()) == "boxed"
    program = textwrap.dedent(f"""
        import raylite as ray
        ray.init({client_head['url']!r})
        print(ray.get(ray.get_actor("shared-box", namespace="shared").get.remote()),
              ray.get_runtime_context().get_job_id())
    """)
    env = dict(os.environ, RAYLITE_TOKEN=client_head["token"], RAYLITE_TEMP_DIR=client_head["temp_dir"],
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    word, job = out.stdout.split()
    assert word == "boxed" and job != ray.get_runtime_context().get_job_id(), out.stderr[-2000:]
    assert ray.get(box.get.remote()) == "boxed"  # the first program is unaffected by the second's exit


def test_client_mode_should_convert_says_whether_calls_go_through_ray_client(ray_client):
    from raylite._private.client_mode_hook import client_mode_should_convert

    assert client_mode_should_convert() is True
    ray_client.shutdown()
    assert client_mode_should_convert() is False
