"""`@serve.multiplexed` and `serve.get_multiplexed_model_id()`: many models per replica, LRU-cached."""

from __future__ import annotations

from typing import Any, Callable


def multiplexed(_func: Callable[..., Any] | None = None, *, max_num_models_per_replica: int = 3) -> Any:
    """Cache the models an async loader returns, per instance, evicting the least recently used.

    The loader takes a model id (`async def get_model(self, model_id: str)`). Concurrent calls for
    the same id share one load; an evicted model's `__del__` (awaited when async) runs before it is
    dropped.
    """
    raise NotImplementedError


def get_multiplexed_model_id() -> str:
    """The model id of the request being handled (the `serve_multiplexed_model_id` header or
    `handle.options(multiplexed_model_id=...)`); "" when the request carries none."""
    raise NotImplementedError


def loaded_model_ids(instance: Any) -> list[str]:
    """The model ids currently loaded by `instance`'s multiplexed loader(s), most recent last
    (the replica reports these so handles route a model's requests to a replica that has it)."""
    raise NotImplementedError
