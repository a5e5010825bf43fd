"""Both clients declare CoreAPI and implement every member the public layer may call."""

from __future__ import annotations

import typing

import pytest

from raylite._core import runtime
from raylite._core.client.core_client import CoreClient
from raylite._core.core_api import CoreAPI
from raylite._core.ray_client.remote_client import RemoteClient

MEMBERS = sorted(typing._get_protocol_attrs(CoreAPI))  # what the Protocol names
METHODS = [m for m in MEMBERS if callable(getattr(CoreAPI, m, None))]


@pytest.mark.parametrize("cls", [CoreClient, RemoteClient], ids=lambda c: c.__name__)
def test_every_method_of_core_api_is_implemented_not_inherited_as_a_stub(cls):
    assert CoreAPI in cls.__mro__  # declared, not only shaped alike
    stubs = [m for m in METHODS if getattr(cls, m) is getattr(CoreAPI, m)]
    assert not stubs, f"{cls.__name__} leaves these CoreAPI methods unimplemented: {stubs}"


def test_the_protocol_names_the_calls_the_public_layer_makes():
    assert {"kv_get", "cluster_info", "named_actor", "create_placement_group", "object_tables",
            "set_resource_request", "submit_task", "get", "put"} <= set(METHODS)
    assert "head_request" not in MEMBERS  # the public layer never sends a message itself


def test_runtime_hands_out_the_client_it_was_given_and_refs_see_it():
    from raylite._core.client import refs

    class Fake:
        pass

    fake = Fake()
    before = runtime.client(), runtime.driver()
    runtime.set_driver(fake, None)  # type: ignore[arg-type]
    try:
        assert runtime.client() is fake and refs._CLIENT[0] is fake
    finally:
        runtime.clear()
        if before[0] is not None:
            runtime.set_driver(*before)
    assert refs._CLIENT[0] is before[0]
