"""DeploymentHandle and its responses (Ray Serve 2.x's `ray.serve.handle`).

`handle.remote(...)` / `handle.method.remote(...)` return a `DeploymentResponse` at once; the
request is carried to a replica on the process's Serve loop. A response is awaitable (in async
code), `.result(timeout_s=)` blocks (in sync code, never inside a replica's loop), and can be
passed as an argument to another handle call: the router awaits it first, so the caller does
not block. With `.options(stream=True)` the call returns a `DeploymentResponseGenerator`,
iterable with `for` and `async for`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from typing import Any

from raylite.serve._internal import client as _client
from raylite.serve._internal import router as _router


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _HandleOptions:
    __slots__ = ("method_name", "stream", "multiplexed_model_id")

    def __init__(self, method_name: str = "__call__", stream: bool = False, multiplexed_model_id: str = "") -> None:
        self.method_name = method_name
        self.stream = stream
        self.multiplexed_model_id = multiplexed_model_id

    def copy(self, **kw: Any) -> _HandleOptions:
        new = _HandleOptions(self.method_name, self.stream, self.multiplexed_model_id)
        for k, v in kw.items():
            if v is not None:
                setattr(new, k, v)
        return new


class DeploymentHandle:
    """A client for a deployment: `handle.remote()`, `handle.other_method.remote()`."""

    def __init__(self, deployment_name: str, app_name: str = "default", *,
                 _options: _HandleOptions | None = None) -> None:
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._opts = _options or _HandleOptions()

    def __reduce__(self):
        return (_rebuild_handle, (self.deployment_name, self.app_name, self._opts.method_name,
                                  self._opts.stream, self._opts.multiplexed_model_id))

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment={self.deployment_name!r}, app={self.app_name!r})"

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                multiplexed_model_id: str | None = None, use_new_handle_api: bool | None = None,
                **_ignored: Any) -> DeploymentHandle:
        """A copy of this handle with other call options."""
        return DeploymentHandle(self.deployment_name, self.app_name, _options=self._opts.copy(
            method_name=method_name, stream=stream, multiplexed_model_id=multiplexed_model_id))

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args: Any, **kwargs: Any) -> DeploymentResponse | DeploymentResponseGenerator:
        """Send the request; returns at once."""
        loop = _client.get_loop()
        opts = self._opts
        from raylite.serve.context import _serve_request_context

        parent = _serve_request_context.get()
        request_id = parent.request_id or uuid.uuid4().hex
        meta = (request_id, parent.route, self.app_name, opts.multiplexed_model_id, opts.stream, opts.method_name)
        if opts.stream:
            gen = DeploymentResponseGenerator(loop, self.deployment_name)
            coro = self._stream(meta, args, kwargs, gen)
            if _on_loop(loop):
                gen._task = loop.create_task(coro)
            else:
                gen._cfut = asyncio.run_coroutine_threadsafe(coro, loop)
            return gen
        coro = self._call(meta, args, kwargs)
        if _on_loop(loop):
            return DeploymentResponse(loop, task=loop.create_task(coro), deployment=self.deployment_name)
        return DeploymentResponse(loop, cfut=asyncio.run_coroutine_threadsafe(coro, loop),
                                  deployment=self.deployment_name)

    async def _resolved(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if any(isinstance(a, DeploymentResponse) for a in args):
            args = tuple([await a if isinstance(a, DeploymentResponse) else a for a in args])
        if any(isinstance(v, DeploymentResponse) for v in kwargs.values()):
            kwargs = {k: (await v if isinstance(v, DeploymentResponse) else v) for k, v in kwargs.items()}
        return args, kwargs

    async def _call(self, meta: tuple, args: tuple, kwargs: dict) -> Any:
        args, kwargs = await self._resolved(args, kwargs)
        router = _client.state().router(self.app_name, self.deployment_name)
        return await _router.call(router, meta, (args, kwargs), self._opts.multiplexed_model_id)

    async def _stream(self, meta: tuple, args: tuple, kwargs: dict, gen: DeploymentResponseGenerator) -> None:
        try:
            args, kwargs = await self._resolved(args, kwargs)
            router = _client.state().router(self.app_name, self.deployment_name)
            await _router.stream(router, meta, (args, kwargs), self._opts.multiplexed_model_id, gen._queue,
                                 gen._sent)
        except BaseException as e:  # noqa: BLE001
            gen._queue.put_nowait(e)


def _rebuild_handle(dep: str, app: str, method: str, stream: bool, model_id: str) -> DeploymentHandle:
    return DeploymentHandle(dep, app, _options=_HandleOptions(method, stream, model_id))


class DeploymentResponse:
    """The future result of a handle call."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, task: asyncio.Task | None = None,
                 cfut: concurrent.futures.Future | None = None, deployment: str = "") -> None:
        self._loop = loop
        self._task = task
        self._cfut = cfut
        self._deployment = deployment

    def __await__(self):
        if self._task is not None and _on_loop(self._loop):
            return self._task.__await__()
        return asyncio.wrap_future(self._concurrent()).__await__()

    def _concurrent(self) -> concurrent.futures.Future:
        if self._cfut is None:
            task = self._task

            async def _wait() -> Any:
                return await task

            self._cfut = asyncio.run_coroutine_threadsafe(_wait(), self._loop)
        return self._cfut

    def result(self, *, timeout_s: float | None = None, _skip_asyncio_check: bool = False) -> Any:
        """Block until the result is ready (or raise the replica's error / TimeoutError)."""
        if _on_loop(self._loop) and not _skip_asyncio_check:
            raise RuntimeError("DeploymentResponse.result() would block the replica's event loop (and "
                               "deadlock); use `await response` inside a deployment")
        try:
            return self._concurrent().result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no result from deployment {self._deployment!r} within {timeout_s}s") from None

    def cancel(self) -> None:
        """Cancel the request (the replica's task is cancelled too)."""
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        elif self._cfut is not None:
            self._cfut.cancel()

    def cancelled(self) -> bool:
        if self._task is not None:
            return self._task.cancelled()
        return bool(self._cfut and self._cfut.cancelled())

    async def _to_object_ref(self, **_kw: Any) -> Any:
        """An ObjectRef holding the result, for passing to Core tasks and actors."""
        import raylite

        return raylite.put(await self)

    def _to_object_ref_sync(self, **_kw: Any) -> Any:
        import raylite

        return raylite.put(self.result())

    def __reduce__(self):
        raise TypeError("a DeploymentResponse cannot be pickled; pass it to another handle call directly, or "
                        "pass `await response._to_object_ref()` to a Core task or actor")


class DeploymentResponseGenerator:
    """The streamed results of a `stream=True` handle call (`for` and `async for`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deployment: str) -> None:
        self._loop = loop
        self._deployment = deployment
        self._queue: asyncio.Queue = asyncio.Queue()
        self._sent: list = []
        self._task: asyncio.Task | None = None
        self._cfut: concurrent.futures.Future | None = None
        self._finished = False

    def _check(self, item: Any) -> Any:
        if item is _router._STREAM_END:
            self._finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        return item

    def __aiter__(self) -> DeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        if self._finished:
            raise StopAsyncIteration
        if _on_loop(self._loop):
            return self._check(await self._queue.get())
        fut = asyncio.run_coroutine_threadsafe(self._queue.get(), self._loop)
        return self._check(await asyncio.wrap_future(fut))

    def __iter__(self) -> DeploymentResponseGenerator:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        if _on_loop(self._loop):
            raise RuntimeError("iterate a DeploymentResponseGenerator with `async for` inside a deployment")
        item = asyncio.run_coroutine_threadsafe(self._queue.get(), self._loop).result()
        try:
            return self._check(item)
        except StopAsyncIteration:
            raise StopIteration from None

    def cancel(self) -> None:
        def _c() -> None:
            for conn, rid in self._sent:
                _router.cancel(conn, rid)
            if self._task is not None:
                self._task.cancel()

        self._loop.call_soon_threadsafe(_c)
        self._finished = True


__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]
