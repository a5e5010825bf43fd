"""ray.autoscaler.sdk.request_resources: Daft's Ray runner calls it before it starts its workers."""

from __future__ import annotations

import pytest

from raylite.autoscaler.sdk import current_request, request_resources


def test_a_request_is_stored_replaced_and_withdrawn_without_blocking(cluster):
    request_resources(num_cpus=64)  # far more than the cluster has: recorded, not waited for
    assert current_request() == {"num_cpus": 64, "bundles": []}
    request_resources(bundles=[{"CPU": 1}, {"CPU": 2, "GPU": 1}])  # what Daft sends
    assert current_request() == {"num_cpus": 0, "bundles": [{"CPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}]}
    request_resources(bundles=[])  # Daft's clear_autoscaling_requests()
    assert current_request() == {"num_cpus": 0, "bundles": []}


def test_malformed_requests_say_what_to_give(cluster):
    with pytest.raises(TypeError, match="list of dicts"):
        request_resources(bundles={"CPU": 1})
    with pytest.raises(TypeError, match="numbers >= 0"):
        request_resources(bundles=[{"CPU": -1}])
    with pytest.raises(TypeError, match="int >= 0"):
        request_resources(num_cpus=1.5)
