"""`@serve.multiplexed` and `serve.get_multiplexed_model_id()`: many models per replica, LRU-cached.

Why: a fleet of small fine-tuned models does not need a deployment each. A replica keeps up to
`max_num_models_per_replica` of them loaded; a request names its model (HTTP header
`serve_multiplexed_model_id`, or `handle.options(multiplexed_model_id=...)`), the replica's loader
returns the cached model or loads it, evicting the least recently used one. The replica reports
`loaded_model_ids(instance)` so handles route a model's requests to a replica that has it.

Pure asyncio, no cluster. One cache per (decorated loader, instance). A model's life:
LOADING -> LOADED [-> used, moved to the most-recent end]* -> EVICTED (its `__del__` awaited if
async, run in a thread if sync, then dropped). A load that fails caches nothing and reaches every
caller waiting on it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

from raylite.serve.batching import defined_as_method

__all__ = ["get_multiplexed_model_id", "loaded_model_ids", "multiplexed"]

logger = logging.getLogger("raylite.serve")

class _FunctionOwner:
    """Owner key of loaders that are plain functions, not methods."""


_FUNCTION_OWNER = _FunctionOwner()
# owner -> {loader wrapper: its cache}; weak on the owner so a dropped replica object frees its models
_CACHES: weakref.WeakKeyDictionary[Any, dict[Callable, _ModelCache]] = weakref.WeakKeyDictionary()
_STRONG_CACHES: dict[int, dict[Callable, _ModelCache]] = {}  # owners without weak references


class _ModelCache:
    """The loaded models of one loader for one owner, least recently used first."""

    def __init__(self, loader: Callable[..., Any], owner: Any, max_models: int) -> None:
        self._loader = loader
        try:  # weak: the registry is keyed weakly on the owner, so the cache must not keep it alive
            self._owner_ref: Callable[[], Any] = weakref.ref(owner)
        except TypeError:
            self._owner_ref = lambda: owner
        self._max_models = max_models
        self.models: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._loading: dict[str, asyncio.Future] = {}
        self._one_at_a_time: asyncio.Lock | None = None  # loads and unloads never overlap (memory)
        self.listeners: list[Callable[[list[str]], None]] = []

    async def get(self, model_id: str) -> Any:
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        pending = self._loading.get(model_id)
        if pending is None:
            pending = self._loading[model_id] = asyncio.ensure_future(self._load(model_id))
        # shield: a caller that gives up does not cancel a load other callers share
        return await asyncio.shield(pending)

    async def _load(self, model_id: str) -> Any:
        if self._one_at_a_time is None:
            self._one_at_a_time = asyncio.Lock()
        self._notify()  # report the id as soon as it is loading, so its requests come here
        try:
            async with self._one_at_a_time:
                await self._make_room()  # free memory before loading, not after
                owner = self._owner_ref()
                if owner is _FUNCTION_OWNER:
                    model = await self._loader(model_id)
                else:
                    model = await self._loader(owner, model_id)
                self.models[model_id] = model
        finally:
            self._loading.pop(model_id, None)
            self._notify()
        return model

    def ids(self, include_loading: bool) -> list[str]:
        ids = list(self.models)
        if include_loading:
            ids.extend(m for m in self._loading if m not in self.models)
        return ids

    async def _make_room(self) -> None:
        while self._max_models != -1 and len(self.models) >= self._max_models:
            model_id, model = self.models.popitem(last=False)
            self._notify()
            await _unload(model_id, model)

    async def unload_all(self) -> None:
        while self.models:
            model_id, model = self.models.popitem(last=False)
            await _unload(model_id, model)
        self._notify()

    def _notify(self) -> None:
        ids = self.ids(include_loading=True)
        for listener in list(self.listeners):
            try:
                listener(ids)
            except Exception:  # noqa: BLE001 - a reporting hook must not break loading
                logger.exception("multiplexed model-id listener failed")


async def _unload(model_id: str, model: Any) -> None:
    """Run the model's `__del__` once (awaited when async, in a thread when sync), then drop it."""
    cleanup = getattr(type(model), "__del__", None)
    if cleanup is None:
        return
    try:
        if inspect.iscoroutinefunction(cleanup):
            await model.__del__()
        else:
            await asyncio.get_running_loop().run_in_executor(None, model.__del__)
    except Exception:  # noqa: BLE001 - a failing cleanup still unloads the model
        logger.exception("__del__ of multiplexed model %r raised; the model is dropped anyway", model_id)
    _disarm_del(model)


def _disarm_del(model: Any) -> None:
    """Keep the garbage collector from running `__del__` a second time (an async one would only
    warn "never awaited"): swap in a same-named subclass whose `__del__` does nothing."""
    cls = type(model)
    quiet = _QUIET_CLASSES.get(cls)
    if quiet is None:
        try:
            quiet = type(cls.__name__, (cls,), {"__del__": lambda self: None, "__module__": cls.__module__,
                                                "__qualname__": cls.__qualname__})
        except TypeError:
            return  # a final or builtin class: leave it as is
        _QUIET_CLASSES[cls] = quiet
    try:
        model.__class__ = quiet
    except TypeError:
        pass


_QUIET_CLASSES: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _caches_of(owner: Any, create: bool = True) -> dict[Callable, _ModelCache] | None:
    try:
        if create:
            return _CACHES.setdefault(owner, {})
        return _CACHES.get(owner)
    except TypeError:
        if create:
            return _STRONG_CACHES.setdefault(id(owner), {})
        return _STRONG_CACHES.get(id(owner))


def _owner_key(instance: Any) -> Any:
    """None or a function deployment's function -> the key of module-level loaders."""
    if instance is None or inspect.isfunction(instance) or inspect.isbuiltin(instance):
        return _FUNCTION_OWNER
    return instance


def _owner_of_call(args: tuple, wrapper: Callable[..., Any]) -> Any:
    if len(args) == 2:
        if getattr(wrapper, "_serve_is_method", False):
            return args[0]
        bound = getattr(type(args[0]), wrapper.__name__, None)
        if bound is wrapper or getattr(bound, "__func__", None) is wrapper:
            return args[0]
    return _FUNCTION_OWNER


def _check_loader(func: Any) -> None:
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"@serve.multiplexed needs an 'async def' model loader taking a model id; "
                        f"{getattr(func, '__qualname__', func)!r} is not async.")
    n_params = len(inspect.signature(func).parameters)
    if n_params not in (1, 2):
        raise TypeError(f"@serve.multiplexed loader {func.__qualname__} must take exactly one argument, "
                        f"the model id (`async def get_model(self, model_id: str)`); it takes {n_params}.")


def _check_max_models(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (value <= 0 and value != -1):
        raise ValueError(f"max_num_models_per_replica must be a positive integer (or -1 for no limit), "
                         f"got {value!r}")
    return value


def multiplexed(func: Callable[..., Any] | None = None, max_num_models_per_replica: int = 3) -> Any:
    """Cache the models an async loader returns, per instance, evicting the least recently used.

    The loader takes a model id (`async def get_model(self, model_id: str)`) and returns the model.
    Calling it returns the cached model, or loads it; concurrent calls for the same id share one
    load. Past `max_num_models_per_replica` models (-1: no limit) the least recently used one is
    evicted: its `__del__` runs (awaited when async) and it is dropped. Usable bare or with
    arguments:

        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str):
            return await load(model_id)

        async def __call__(self, request):
            model = await self.get_model(serve.get_multiplexed_model_id())
    """
    max_models = _check_max_models(max_num_models_per_replica)

    def decorate(loader: Callable[..., Any]) -> Callable[..., Any]:
        _check_loader(loader)

        @functools.wraps(loader)
        async def wrapper(*args: Any) -> Any:
            owner = _owner_of_call(args, wrapper)
            model_id = args[-1]
            if not isinstance(model_id, str):
                raise TypeError(f"the model id passed to {loader.__qualname__} must be a str, "
                                f"got {type(model_id).__name__}: {model_id!r}")
            caches = _caches_of(owner)
            cache = caches.get(wrapper)
            if cache is None:
                cache = caches[wrapper] = _ModelCache(loader, owner, max_models)
            return await cache.get(model_id)

        wrapper._serve_multiplexed_max_models = max_models
        wrapper._serve_is_method = defined_as_method(loader)
        return wrapper

    if func is not None:
        if not callable(func):
            raise TypeError(f"@serve.multiplexed got {func!r}; pass the limit by keyword: "
                            "@serve.multiplexed(max_num_models_per_replica=3)")
        return decorate(func)
    return decorate


def get_multiplexed_model_id() -> str:
    """The model id of the request being handled (the `serve_multiplexed_model_id` HTTP header or
    `handle.options(multiplexed_model_id=...)`); "" when the request carries none."""
    try:
        from raylite.serve.context import _serve_request_context
    except ImportError:  # the runtime is not installed: no request is being handled
        return ""
    context = _serve_request_context.get(None)
    if context is None:
        return ""
    return getattr(context, "multiplexed_model_id", "") or ""


def loaded_model_ids(instance: Any = None, include_loading: bool = True) -> list[str]:
    """The model ids that `instance`'s multiplexed loaders hold, least recently used first, then
    those still loading (as Ray reports them, so requests for a model being loaded already go to
    this replica). `instance` None or a function deployment's function: the loaders that are
    plain functions. The replica reports these so handles route a model's requests here."""
    caches = _caches_of(_owner_key(instance), create=False) or {}
    ids: list[str] = []
    for cache in caches.values():
        ids.extend(m for m in cache.ids(include_loading) if m not in ids)
    return ids


def _add_model_ids_listener(instance: Any, loader: Callable[..., Any],
                            listener: Callable[[list[str]], None]) -> None:
    """Call `listener(ids)` whenever the loaded ids of `instance.loader` change (for the replica to
    push them without polling). `loader` is the decorated function (e.g. `type(obj).get_model`)."""
    caches = _caches_of(_owner_key(instance))
    loader = getattr(loader, "__func__", loader)
    cache = caches.get(loader)
    if cache is None:
        max_models = getattr(loader, "_serve_multiplexed_max_models", None)
        if max_models is None:
            raise TypeError(f"{loader!r} is not a @serve.multiplexed loader")
        owner = _owner_key(instance)
        cache = caches[loader] = _ModelCache(loader.__wrapped__, owner, max_models)
    cache.listeners.append(listener)


async def _unload_all_models(instance: Any = None) -> None:
    """Evict every model of `instance` (replica shutdown), running each model's `__del__`."""
    caches = _caches_of(_owner_key(instance), create=False) or {}
    for cache in list(caches.values()):
        await cache.unload_all()
