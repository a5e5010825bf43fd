"""Inside a @serve.batch function, which requests make up the batch: Ray's
serve.context._get_serve_batch_request_context() lists their contexts, and the single "current
request" context is empty there (no one request is being handled). Pure asyncio, no cluster."""

from __future__ import annotations

import asyncio

from raylite.serve import batching, context


def test_batch_function_sees_every_callers_context_and_no_current_request():
    @batching.batch(max_batch_size=3, batch_wait_timeout_s=5)
    async def score(items):
        batch_ids = [c.request_id for c in context._get_serve_batch_request_context()]
        current = context._get_serve_request_context()
        return [(item, batch_ids, current.request_id, current.route) for item in items]

    async def caller(i):
        context._serve_request_context.set(context.RequestContext(request_id=f"req-{i}", route="/score"))
        return await score(i)

    async def main():
        return await asyncio.gather(*(caller(i) for i in range(3)))

    results = asyncio.run(main())
    assert [r[0] for r in results] == [0, 1, 2]
    for _, batch_ids, current_id, current_route in results:
        assert batch_ids == ["req-0", "req-1", "req-2"]
        assert (current_id, current_route) == ("", "")


def test_outside_a_batch_the_batch_context_is_empty_and_the_request_context_is_the_callers():
    async def main():
        context._serve_request_context.set(context.RequestContext(request_id="solo"))
        return context._get_serve_batch_request_context(), context._get_serve_request_context().request_id

    assert asyncio.run(main()) == ([], "solo")


def test_runtime_summary_statistics_names_the_earliest_and_latest_start():
    stats = batching._RuntimeSummaryStatistics(start_times=[3.0, 1.0, 2.0])
    assert (stats.min_start_time, stats.max_start_time, stats.num_iterations) == (1.0, 3.0, 3)
    assert batching._RuntimeSummaryStatistics(start_times=[]).min_start_time is None


def test_observability_helpers_report_running_batches_and_the_batching_task():
    release = None

    @batching.batch(max_batch_size=2, batch_wait_timeout_s=0.05)
    async def slow(items):
        await release.wait()
        return items

    async def main():
        nonlocal release
        release = asyncio.Event()
        assert await slow._is_batching_task_alive()  # no queue yet: it starts with the first call
        calls = [asyncio.ensure_future(slow(i)) for i in range(2)]
        while not slow._get_curr_iteration_start_times().start_times:
            await asyncio.sleep(0.01)
        stats = slow._get_curr_iteration_start_times()
        alive = await slow._is_batching_task_alive()
        stack = await slow._get_handling_task_stack()
        release.set()
        results = await asyncio.gather(*calls)
        return stats.num_iterations, alive, stack, results

    num, alive, stack, results = asyncio.run(main())
    assert num == 1 and alive and isinstance(stack, str) and results == [0, 1]


def test_a_batch_size_fn_that_is_not_callable_is_refused_in_rays_words():
    import pytest

    with pytest.raises(TypeError, match="batch_size_fn must be a callable or None"):
        batching.batch(batch_size_fn="not a function")
