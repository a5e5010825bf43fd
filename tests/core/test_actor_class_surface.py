"""What an actor class and an actor handle show, as in Ray: the class's own attributes through
the actor class, `dir()` for completion, the built-in `__ray_call__`, and `@remote()` refused."""

from __future__ import annotations

import pytest

import raylite


class Base:
    LIMIT = 5


@raylite.remote
class Counter(Base):
    STEP = 2

    def __init__(self, start=0):
        self.value = start

    @classmethod
    def doubled_step(cls):
        return cls.STEP * 2

    @staticmethod
    def unit():
        return 1

    def read(self):
        return self.value, Counter.STEP, Counter.LIMIT, Counter.doubled_step()


def test_the_actor_class_shows_the_class_attributes():
    assert (Counter.STEP, Counter.LIMIT, Counter.doubled_step(), Counter.unit()) == (2, 5, 4, 1)
    with pytest.raises(AttributeError):
        Counter.nothing_here  # noqa: B018
    assert {"read", "remote", "options", "bind", "STEP"} <= set(dir(Counter))


def test_inside_the_actor_the_class_name_reaches_its_attributes(cluster):
    assert raylite.get(Counter.remote(3).read.remote()) == (3, 2, 5, 4)


def test_handle_dir_and_ray_call(cluster):
    handle = Counter.remote(7)
    assert [n for n in dir(handle) if not n.startswith("_")] == ["doubled_step", "read", "unit"]
    assert {"__ray_ready__", "__ray_call__", "__ray_terminate__"} <= set(dir(handle))
    assert raylite.get(handle.__ray_call__.remote(lambda self, extra: self.value + extra, 1)) == 8


def test_remote_with_empty_parentheses_is_refused():
    with pytest.raises(TypeError, match="must be applied either with no arguments"):
        @raylite.remote()
        class Nope:
            pass


def test_a_module_level_actor_class_works_when_workers_cannot_import_its_module(cluster, tmp_path, monkeypatch):
    """The class attribute lookup must not hand out the class's own function objects: cloudpickle
    would then pickle the methods by reference and every worker would import the module."""
    import importlib
    import sys

    (tmp_path / "only_here_actors.py").write_text(
        "import raylite\n\n"
        "@raylite.remote\n"
        "class Here:\n"
        "    def value(self):\n"
        "        return 'by value'\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver only: workers never see this path
    module = importlib.import_module("only_here_actors")
    try:
        assert callable(module.Here.value)  # the lookup that used to leak the function itself
        assert raylite.get(module.Here.remote().value.remote()) == "by value"
    finally:
        sys.modules.pop("only_here_actors", None)
