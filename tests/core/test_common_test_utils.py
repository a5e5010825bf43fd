"""`ray._common.test_utils` / `ray._private.test_utils`: the helpers Ray users' own test suites
import (SignalActor, Semaphore, wait_for_condition, kill_actor_and_wait_for_failure). They are
real modules, so a task that uses one unpickles on a worker too."""

from __future__ import annotations

import pytest

import raylite as ray
from raylite._common.test_utils import (
    Semaphore,
    SignalActor,
    run_string_as_driver,
    wait_for_condition,
)
from raylite._private.test_utils import kill_actor_and_wait_for_failure


@ray.remote
def waits_for(signal) -> str:
    ray.get(signal.wait.remote())
    return "through"


@ray.remote
def uses_a_helper() -> bool:
    return wait_for_condition(lambda: True, timeout=1)


def test_tasks_wait_on_a_signal_until_it_is_sent(cluster):
    signal = SignalActor.remote()
    refs = [waits_for.remote(signal) for _ in range(2)]
    wait_for_condition(lambda: ray.get(signal.cur_num_waiters.remote()) == 2)
    assert ray.wait(refs, timeout=0.2)[0] == []  # both still held
    ray.get(signal.send.remote())
    assert ray.get(refs) == ["through", "through"]
    assert ray.get(signal.cur_num_waiters.remote()) == 0
    ray.get(signal.send.remote(clear=True))  # re-armed: a new waiter waits again
    ref = waits_for.remote(signal)
    assert ray.wait([ref], timeout=0.2)[0] == []
    ray.get(signal.send.remote())
    assert ray.get(ref) == "through"


def test_a_task_may_use_the_helpers_on_a_worker(cluster):
    assert ray.get(uses_a_helper.remote()) is True


def test_semaphore_actor(cluster):
    sem = Semaphore.remote(1)
    ray.get(sem.acquire.remote())
    assert ray.get(sem.locked.remote()) is True
    ray.get(sem.release.remote())
    assert ray.get(sem.locked.remote()) is False


def test_kill_actor_and_wait_for_failure(cluster):
    @ray.remote(max_restarts=1)
    class Restartable:
        def ping(self) -> int:
            return 1

    actor = Restartable.remote()
    assert ray.get(actor.ping.remote()) == 1
    kill_actor_and_wait_for_failure(actor)
    assert ray.util.state.get_actor(id=actor._actor_id.hex()).state == "DEAD"


def test_wait_for_condition_names_the_last_error_on_timeout():
    def never() -> bool:
        raise ValueError("not yet")

    with pytest.raises(RuntimeError, match="ValueError: not yet"):
        wait_for_condition(never, timeout=0.3, retry_interval_ms=50)


def test_run_string_as_driver_returns_output_and_raises_with_it():
    assert run_string_as_driver("print('hello from a driver')").strip() == "hello from a driver"
    with pytest.raises(Exception) as info:
        run_string_as_driver("import sys; print('boom'); sys.exit(3)")
    assert "boom" in info.value.output


@ray.remote
def converts_in_a_worker() -> bool:
    from raylite._private.client_mode_hook import client_mode_should_convert

    return client_mode_should_convert()


def test_client_mode_should_convert_is_false_outside_ray_client(cluster):
    from raylite._private.client_mode_hook import client_mode_should_convert

    assert client_mode_should_convert() is False
    assert ray.get(converts_in_a_worker.remote()) is False


@ray.remote
def fails() -> None:
    raise ValueError("no luck")


def test_on_completed_calls_back_with_the_value_or_the_error_then_lets_go(cluster):
    import sys
    import threading

    seen: list = []
    arrived = threading.Event()

    def callback(value) -> None:
        seen.append(value)
        arrived.set()

    ray.put(7)._on_completed(callback)
    assert arrived.wait(10) and seen == [7]
    arrived.clear()
    signal = SignalActor.remote()
    ref = waits_for.remote(signal)
    before = sys.getrefcount(callback)
    ref._on_completed(callback)
    assert sys.getrefcount(callback) > before  # held while the task runs
    assert not arrived.wait(0.2)
    ray.get(signal.send.remote())
    assert arrived.wait(10) and seen[-1] == "through"
    wait_for_condition(lambda: sys.getrefcount(callback) == before)  # and let go once called
    arrived.clear()
    fails.remote()._on_completed(callback)
    assert arrived.wait(10) and isinstance(seen[-1], ValueError)


def test_enable_client_mode_marks_the_block_only():
    # Ray's test_generators imports it at the top: a missing name stopped the whole module
    from raylite._private.client_mode_hook import (
        disable_client_hook,
        enable_client_mode,
        is_client_mode_enabled,
    )

    assert not is_client_mode_enabled()
    with enable_client_mode():
        assert is_client_mode_enabled()
        with disable_client_hook():
            assert is_client_mode_enabled()
    assert not is_client_mode_enabled()
