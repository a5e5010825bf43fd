"""@serve.multiplexed with plain asyncio: no cluster."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import types

import pytest

from raylite.serve.multiplex import (
    _unload_all_models,
    get_multiplexed_model_id,
    loaded_model_ids,
    multiplexed,
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class Model:
    def __init__(self, model_id: str, unloaded: list[str]) -> None:
        self.model_id = model_id
        self._unloaded = unloaded

    async def __del__(self):
        self._unloaded.append(self.model_id)


class SyncModel(Model):
    def __del__(self):
        self._unloaded.append(self.model_id)


class Server:
    def __init__(self, model_cls=Model) -> None:
        self.loads: list[str] = []
        self.unloaded: list[str] = []
        self.model_cls = model_cls

    @multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str):
        self.loads.append(model_id)
        await asyncio.sleep(0.01)
        return self.model_cls(model_id, self.unloaded)


def test_cached_model_is_reused_and_lru_is_evicted_with_async_del():
    s = Server()

    async def main():
        a = await s.get_model("a")
        assert await s.get_model("a") is a
        await s.get_model("b")
        await s.get_model("a")  # a becomes most recent
        await s.get_model("c")  # evicts b
        assert s.unloaded == ["b"]
        assert loaded_model_ids(s) == ["a", "c"]
        await _unload_all_models(s)  # what a replica does on shutdown
        return a

    a = run(main())
    assert s.loads == ["a", "b", "c"]
    assert s.unloaded == ["b", "a", "c"]
    assert loaded_model_ids(s) == []
    assert a.model_id == "a"


def test_sync_del_runs_once_on_eviction():
    s = Server(SyncModel)

    async def main():
        for mid in ["x", "y", "z"]:
            await s.get_model(mid)

    run(main())
    assert s.unloaded == ["x"]
    gc.collect()
    assert s.unloaded == ["x"]  # not run a second time by the garbage collector


def test_concurrent_loads_of_one_id_share_a_single_load():
    s = Server()

    async def main():
        models = await asyncio.gather(*(s.get_model("m") for _ in range(5)))
        await _unload_all_models(s)
        return models

    models = run(main())
    assert s.loads == ["m"]
    assert all(m is models[0] for m in models)


def test_failed_load_reaches_waiters_and_caches_nothing():
    attempts = []

    class Flaky:
        @multiplexed
        async def load(self, model_id: str):
            attempts.append(model_id)
            if len(attempts) == 1:
                raise OSError("disk gone")
            return model_id.upper()

    f = Flaky()

    async def main():
        errors = await asyncio.gather(f.load("m"), f.load("m"), return_exceptions=True)
        assert [type(e) for e in errors] == [OSError, OSError]
        assert loaded_model_ids(f) == []
        return await f.load("m")

    assert run(main()) == "M"
    assert attempts == ["m", "m"]


def test_caches_are_per_instance_and_function_loaders_work():
    a, b = Server(), Server()

    @multiplexed(max_num_models_per_replica=1)
    async def load(model_id: str):
        return model_id * 2

    async def main():
        await a.get_model("1")
        await b.get_model("2")
        assert loaded_model_ids(a) == ["1"] and loaded_model_ids(b) == ["2"]
        await _unload_all_models(a)
        await _unload_all_models(b)
        return await load("q"), await load("r")

    assert run(main()) == ("qq", "rr")
    assert loaded_model_ids(load) == ["r"]  # a function deployment passes its function
    assert "rr" not in loaded_model_ids() and loaded_model_ids() == ["r"]


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="async"):
        @multiplexed
        def sync_loader(self, model_id):
            return model_id
    with pytest.raises(TypeError, match="exactly one argument"):
        @multiplexed
        async def two(self, a, b):
            return a
    with pytest.raises(ValueError, match="max_num_models_per_replica"):
        multiplexed(max_num_models_per_replica=0)
    with pytest.raises(TypeError, match="must be a str"):
        run(Server().get_model(3))


def test_get_multiplexed_model_id_reads_the_request_context(monkeypatch):
    assert get_multiplexed_model_id() == ""
    try:
        import raylite.serve.context as ctx_module
    except ImportError:
        ctx_module = None
    var = getattr(ctx_module, "_serve_request_context", None)
    if var is None:  # the runtime's context module is not on this branch yet: its contract
        var = contextvars.ContextVar("serve_request_context")
        fake = types.ModuleType("raylite.serve.context")
        fake._serve_request_context = var
        monkeypatch.setitem(sys.modules, "raylite.serve.context", fake)
        value = types.SimpleNamespace(route="/", request_id="r1", app_name="app", multiplexed_model_id="m7")
    else:
        value = ctx_module.RequestContext(route="/", request_id="r1", app_name="app",
                                          multiplexed_model_id="m7")
    token = var.set(value)
    try:
        assert get_multiplexed_model_id() == "m7"
    finally:
        var.reset(token)


def test_loads_run_one_at_a_time_and_loading_ids_are_reported():
    from raylite.serve.multiplex import _add_model_ids_listener

    class Slow:
        def __init__(self) -> None:
            self.active = 0
            self.peak = 0
            self.gate = None

        @multiplexed(max_num_models_per_replica=2)
        async def load(self, model_id: str):
            self.active += 1
            self.peak = max(self.peak, self.active)
            await self.gate.wait()
            self.active -= 1
            return model_id

    s = Slow()
    reports: list[list[str]] = []
    _add_model_ids_listener(s, Slow.load, reports.append)

    async def main():
        s.gate = asyncio.Event()
        tasks = [asyncio.ensure_future(s.load(m)) for m in ("a", "b")]
        for _ in range(100):
            await asyncio.sleep(0)
        assert loaded_model_ids(s) == ["a", "b"]  # both loading: both reported
        assert loaded_model_ids(s, include_loading=False) == []
        s.gate.set()
        return await asyncio.gather(*tasks)

    assert run(main()) == ["a", "b"]
    assert s.peak == 1
    assert reports[-1] == ["a", "b"]


def test_decorated_class_pickles_by_value_and_works_after_loading():
    import cloudpickle

    class Local:
        @multiplexed(max_num_models_per_replica=1)
        async def get_model(self, model_id: str):
            return model_id[::-1]

    warm = Local()
    assert run(warm.get_model("abc")) == "cba"  # a cache exists before pickling the class
    copy_cls = cloudpickle.loads(cloudpickle.dumps(Local))
    fresh = copy_cls()
    assert run(fresh.get_model("xyz")) == "zyx"
    assert loaded_model_ids(fresh) == ["xyz"]
