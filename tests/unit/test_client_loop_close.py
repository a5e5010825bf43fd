"""A client's I/O loop that stops with requests still waiting closes quietly: no "Task was
destroyed but it is pending!" on the terminal of a program that has just finished (a job's
driver printed it when a lease request was unanswered at exit)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from raylite._core.client.core_client import finish_pending_tasks


def _loops():
    yield pytest.param(asyncio.new_event_loop, id="asyncio")
    try:
        import uvloop
    except ImportError:
        return
    yield pytest.param(uvloop.new_event_loop, id="uvloop")


def _stop_with_a_waiting_request(new_loop, finish: bool) -> list[str]:
    """Run a loop whose task waits on a reply that never comes (and whose `finally` starts
    another such task, as a lease request's does), stop it, close it, and return what the
    loop reported about destroyed tasks."""
    loop = new_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    unwound: list[str] = []

    async def wait_forever(name: str, then_start_another: bool) -> None:
        try:
            await loop.create_future()
        finally:
            unwound.append(name)
            if then_start_another and not loop.is_closed():
                loop.create_task(wait_forever("follow-up", False))

    loop.create_task(wait_forever("lease request", True))
    loop.call_soon(loop.stop)
    loop.run_forever()
    if finish:
        finish_pending_tasks(loop)
        assert unwound == ["lease request", "follow-up"]
    loop.close()
    gc.collect()  # a task dropped while pending is reported when it is collected
    return reported


@pytest.mark.parametrize("new_loop", list(_loops()))
def test_tasks_pending_at_stop_are_cancelled_and_unwound_before_the_loop_closes(new_loop):
    assert not any("destroyed" in m for m in _stop_with_a_waiting_request(new_loop, finish=True))


@pytest.mark.parametrize("new_loop", list(_loops()))
def test_without_it_the_loop_reports_the_destroyed_task(new_loop):
    # the control: what users saw, so the test above can fail
    assert any("Task was destroyed but it is pending" in m
               for m in _stop_with_a_waiting_request(new_loop, finish=False))
