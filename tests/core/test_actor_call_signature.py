"""An actor method called with arguments its signature cannot take fails at `.remote()` with
TypeError, as in Ray, rather than as a failed task later."""

from __future__ import annotations

import pytest

import raylite


@raylite.remote
class Calc:
    def add(self, a, b=1, *, scale=1):
        return (a + b) * scale

    @staticmethod
    def twice(x):
        return 2 * x

    @classmethod
    def name(cls, suffix=""):
        return cls.__name__ + suffix

    def anything(self, *args, **kwargs):
        return len(args) + len(kwargs)


def test_a_call_that_does_not_fit_the_signature_is_a_type_error_at_remote(cluster):
    calc = Calc.remote()
    with pytest.raises(TypeError, match=r"Calc\.add\.remote\(\) got bad arguments"):
        calc.add.remote()
    with pytest.raises(TypeError):
        calc.add.remote(1, 2, 3)
    with pytest.raises(TypeError):
        calc.add.remote(1, c=2)
    with pytest.raises(TypeError):
        calc.twice.remote()
    with pytest.raises(TypeError):
        calc.name.remote("a", "b")


def test_calls_that_fit_still_run(cluster):
    calc = Calc.remote()
    assert raylite.get(calc.add.remote(1)) == 2
    assert raylite.get(calc.add.remote(a=1, b=2, scale=3)) == 9
    assert raylite.get(calc.twice.remote(4)) == 8
    assert raylite.get(calc.name.remote("!")) == "Calc!"
    assert raylite.get(calc.anything.remote(1, 2, k=3)) == 3
    assert raylite.get(calc.add.options(num_returns=1).remote(2, 2)) == 4


def test_a_handle_passed_to_a_task_still_checks_calls_there(cluster):
    @raylite.remote
    def call_wrongly(handle):
        try:
            handle.add.remote(1, 2, 3)
        except TypeError as e:
            return "TypeError: " + str(e)
        return "accepted"

    calc = Calc.remote()
    assert raylite.get(call_wrongly.remote(calc)).startswith("TypeError: Calc.add.remote() got bad arguments")


@raylite.remote
def plain(a, b=1):
    return a + b


@raylite.remote
def keyword_only(a, *, scale=2):
    return a * scale


def test_a_task_call_that_does_not_fit_is_a_type_error_at_remote(cluster):
    # plain parameters: positional calls are checked by counting them (the fast path), any
    # keyword goes through the full bind; both refuse what does not fit
    with pytest.raises(TypeError, match=r"plain\.remote\(\) got bad arguments: missing a required argument"):
        plain.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        plain.remote(1, 2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        plain.remote(1, c=2)
    with pytest.raises(TypeError, match="too many positional arguments"):
        keyword_only.remote(1, 2)
    assert raylite.get([plain.remote(1), plain.remote(1, 5), plain.remote(a=3), plain.options(name="p").remote(2, b=2),
                        keyword_only.remote(2), keyword_only.remote(2, scale=5)]) == [2, 6, 4, 4, 4, 10]


def test_an_async_def_function_is_refused_at_the_decorator():
    async def fetch():
        return 1

    with pytest.raises(ValueError, match=r"fetch is an `async def` function.*asyncio.run\(fetch"):
        raylite.remote(fetch)
    with pytest.raises(ValueError, match="async def"):
        raylite.remote(num_cpus=1)(fetch)

    @raylite.remote
    class AsyncActor:  # an async actor's methods are fine
        async def fetch(self):
            return 1

    assert AsyncActor is not None
