"""`ray._private.test_utils`: `wait_for_condition`, which Ray's documentation examples use to wait
for something to become true (a log line, a counter) without a fixed sleep, and the other
helpers Ray users' test suites import from here (Ray 2.60 also has the first ones in
`ray._common.test_utils`: raylite/_common)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for_condition(condition_predictor: Callable[..., Any], timeout: float = 10, retry_interval_ms: float = 100,
                       raise_exceptions: bool = False, **kwargs: Any) -> bool:
    """Call `condition_predictor(**kwargs)` until it returns a truthy value (then return True), or
    raise RuntimeError after `timeout` seconds. Exceptions it raises count as "not yet" unless
    `raise_exceptions`; the last one is named in the timeout error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if condition_predictor(**kwargs):
                return True
        except Exception as e:  # noqa: BLE001 - retried, reported at the end
            if raise_exceptions:
                raise
            last = e
        time.sleep(retry_interval_ms / 1000.0)
    message = f"The condition wasn't met before the timeout expired ({timeout}s)."
    if last is not None:
        message += f" Last exception: {type(last).__name__}: {last}"
    raise RuntimeError(message)


async def async_wait_for_condition(condition_predictor: Callable[..., Any], timeout: float = 10,
                                   retry_interval_ms: float = 100, **kwargs: Any) -> bool:
    """The same, awaiting the predictor's result when it is a coroutine."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            out = condition_predictor(**kwargs)
            if asyncio.iscoroutine(out):
                out = await out
            if out:
                return True
        except Exception as e:  # noqa: BLE001
            last = e
        await asyncio.sleep(retry_interval_ms / 1000.0)
    message = f"The condition wasn't met before the timeout expired ({timeout}s)."
    if last is not None:
        message += f" Last exception: {type(last).__name__}: {last}"
    raise RuntimeError(message)


def kill_actor_and_wait_for_failure(actor: Any, timeout: float = 10, retry_interval_ms: float = 100) -> None:
    """`ray.kill(actor)`, then wait until the state API shows it DEAD or restarted once more;
    RuntimeError, naming the actor, if that takes longer than `timeout` seconds."""
    import raylite
    from raylite.util.state import get_actor

    actor_id = actor._actor_id.hex()
    restarts = get_actor(id=actor_id).num_restarts
    raylite.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = get_actor(id=actor_id)
        if state.state == "DEAD" or state.num_restarts > restarts:
            return
        time.sleep(retry_interval_ms / 1000.0)
    raise RuntimeError(f"actor {actor_id} was killed but is not DEAD or restarted after {timeout}s")
