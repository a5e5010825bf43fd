"""`@serve.batch`: gather concurrent calls into one list call (Ray Serve's request batching).

Pure asyncio, no cluster: one queue per (decorated function, instance, event loop).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def batch(_func: F | None = None, *, max_batch_size: int = 10,
          batch_wait_timeout_s: float = 0.01) -> Any:
    """Batch concurrent calls of an async function or method.

    Each caller passes one item; the decorated function receives a list of items and must return
    a list of the same length (or, as an async generator, yield such lists). A batch is flushed
    when `max_batch_size` items are waiting or `batch_wait_timeout_s` has passed since the first.
    Usable bare (`@serve.batch`) or with arguments. The decorated callable gets
    `set_max_batch_size(n)` and `set_batch_wait_timeout_s(s)`.
    """
    raise NotImplementedError
