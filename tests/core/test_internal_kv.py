"""raylite.experimental.internal_kv: the cluster key-value store under Ray's names."""

import asyncio

import pytest

import raylite
from raylite.experimental import internal_kv as kv


def test_put_get_list_delete(cluster):
    assert kv._internal_kv_initialized()
    assert kv._internal_kv_put("a/1", b"one", namespace="t") is False
    assert kv._internal_kv_put(b"a/2", "two", namespace="t") is False
    assert kv._internal_kv_put("a/1", b"uno", overwrite=False, namespace="t") is True
    assert kv._internal_kv_get("a/1", namespace="t") == b"one"
    assert kv._internal_kv_get("a/1") is None  # other namespace
    assert sorted(kv._internal_kv_list("a/", namespace="t")) == [b"a/1", b"a/2"]
    assert kv._internal_kv_exists("a/2", namespace="t")
    assert kv._internal_kv_del("a/", del_by_prefix=True, namespace="t") == 2
    assert kv._internal_kv_get("a/2", namespace="t") is None


def test_visible_from_a_task_and_async(cluster):
    @raylite.remote
    def write():
        from raylite.experimental import internal_kv

        return internal_kv._internal_kv_put("from-task", b"x", namespace="t")

    raylite.get(write.remote())

    async def read():
        return await kv._internal_kv_get_async("from-task", namespace="t")

    assert asyncio.run(read()) == b"x"


def test_bad_types_are_clear_errors(cluster):
    with pytest.raises(TypeError, match="values must be bytes"):
        kv._internal_kv_put("k", {"a": 1})
    with pytest.raises(TypeError, match="key must be str or bytes"):
        kv._internal_kv_get(3)


def test_keys_under_rays_reserved_namespace_prefix_are_refused(cluster):
    # Ray's store keeps namespaces under "@namespace_" inside its keys and refuses such keys
    # in every call; a refused put stores nothing
    for call in (lambda: kv._internal_kv_put("@namespace_", "x", True),
                 lambda: kv._internal_kv_get("@namespace_", namespace="n"),
                 lambda: kv._internal_kv_del("@namespace_def", namespace="n"),
                 lambda: kv._internal_kv_list("@namespace_abc", namespace="n")):
        with pytest.raises(raylite.exceptions.RaySystemError, match="reserved prefix"):
            call()
    assert kv._internal_kv_put("namespace_ok", b"v") is False  # only the prefix is reserved
    assert kv._internal_kv_get("namespace_ok") == b"v"
