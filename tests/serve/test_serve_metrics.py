"""`ray.serve.metrics`: metrics made in a replica carry its deployment, replica and application."""

from __future__ import annotations

import pytest


def test_serve_metrics_are_tagged_with_the_replica(serve_instance):
    serve, _ = serve_instance

    @serve.deployment
    class Tagged:
        def __init__(self) -> None:
            from raylite.serve import metrics

            self.counter = metrics.Counter("serve_test_requests", description="d", tag_keys=("model",))
            self.counter.set_default_tags({"model": "123"})
            self.gauge = metrics.Gauge("serve_test_route", tag_keys=("route",))

        def __call__(self) -> dict:
            from raylite.serve import metrics

            self.counter.inc()
            self.gauge.set(1.0)  # "route" comes from the request
            with pytest.raises(ValueError, match="reserved"):
                metrics.Counter("serve_test_bad", tag_keys=("deployment",))
            return self.counter.info

    info = serve.run(Tagged.bind(), name="tagged", route_prefix="/tagged").remote().result()
    assert info["tag_keys"] == ("deployment", "replica", "application", "model")
    tags = info["default_tags"]
    assert tags["deployment"] == "Tagged" and tags["application"] == "tagged" and tags["model"] == "123"
    assert tags["replica"].startswith("tagged#Tagged#")
    serve.delete("tagged")


def test_outside_a_replica_they_are_plain_metrics():
    from raylite.serve import metrics

    c = metrics.Counter("serve_test_plain", tag_keys=("a",))
    assert c.info["tag_keys"] == ("a",)
    with pytest.raises(TypeError, match="tuple"):
        metrics.Counter("serve_test_list", tag_keys=["a"])
