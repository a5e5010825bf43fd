"""The autoscaler's rows in the head: reached through PublishAutoscalerView/RequestResources, kept
(and persisted) as key-value rows of the control store."""

from __future__ import annotations

import json

from raylite._core import resources as R
from raylite._core.clock import FakeClock
from raylite._core.head import control_store as CS
from raylite._core.head.control_store import ControlStore


def test_a_published_view_makes_a_node_type_launchable_and_withdrawing_it_does_not():
    store = ControlStore(FakeClock(), node_dead_timeout_s=5.0)
    view = json.dumps({"node_types": {"big": {"resources": {"CPU": 8}}}}).encode()
    effects = store.publish_autoscaler_view(view)
    assert [type(e) for e in effects] == [CS.Persist]
    assert store.autoscaler_view() == view
    assert store.launchable_fits(R.to_fixed({"CPU": 8}))
    assert [type(e) for e in store.publish_autoscaler_view(b"")] == [CS.Unpersist]
    assert store.autoscaler_view() is None
    assert not store.launchable_fits(R.to_fixed({"CPU": 8}))


def test_a_resource_request_shows_in_the_demands_until_it_is_dropped():
    store = ControlStore(FakeClock(), node_dead_timeout_s=5.0)
    store.request_resources(b'{"bundles": [{"CPU": 1.0}]}')
    assert json.loads(store.demands()["requested"]) == {"bundles": [{"CPU": 1.0}]}
    store.request_resources(b"")
    assert store.demands()["requested"] == ""
