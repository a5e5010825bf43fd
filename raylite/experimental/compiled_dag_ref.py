"""CompiledDAGRef: the result of one execution of a compiled graph, read with `ray.get`.

Like an ObjectRef, but (as in Ray) it can be read only once, cannot be passed to tasks or
pickled, and `ray.wait` does not take it: the value never enters the object store, it waits
in the driver until read. `CompiledDAGFuture` is its asyncio form (`await dag.execute_async()`).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CompiledDAGFuture", "CompiledDAGRef"]


class CompiledDAGRef:
    """Execution `execution_index` of `dag`, output `channel_index` (None: all outputs)."""

    def __init__(self, dag: Any, execution_index: int, channel_index: int | None = None) -> None:
        self._dag = dag
        self._execution_index = execution_index
        self._channel_index = channel_index
        self._fetched = False

    def get(self, timeout: float | None = None) -> Any:
        if self._fetched:
            raise ValueError(f"{self!r} was already read: ray.get() can be called only once on a "
                             "CompiledDAGRef.")
        try:
            value = self._dag._get(self._execution_index, self._channel_index, timeout)
        except TimeoutError:
            raise  # still unread: get() may be called again
        except BaseException:
            self._fetched = True
            raise
        self._fetched = True
        return value

    def __del__(self) -> None:
        if not getattr(self, "_fetched", True):
            self._dag._release(self._execution_index, self._channel_index)

    def __reduce__(self) -> Any:
        raise TypeError("A CompiledDAGRef cannot be pickled or passed to a task: ray.get() it in the "
                        "driver that executed the compiled graph and pass the value.")

    def __copy__(self) -> Any:
        raise TypeError("A CompiledDAGRef cannot be copied.")

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("A CompiledDAGRef cannot be copied.")

    def __repr__(self) -> str:
        return (f"CompiledDAGRef(execution_index={self._execution_index}, "
                f"channel_index={self._channel_index})")


class CompiledDAGFuture:
    """An awaitable result of `execute_async()`: `await fut` gives the value (or raises)."""

    def __init__(self, ref: CompiledDAGRef) -> None:
        self._ref = ref

    def __await__(self) -> Any:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self._ref.get).__await__()

    def __repr__(self) -> str:
        return f"CompiledDAGFuture({self._ref!r})"
