"""Pure parts of Serve: option validation (kept in step with the pydantic models), the rolling
update plan, frame encoding, and percentiles."""

import pytest

from raylite.serve._internal import options, wire
from raylite.serve._internal.deployment_state import (
    RUNNING,
    STARTING,
    STOPPING,
    DeploymentRecord,
    ReplicaRecord,
    percentile,
    plan,
)
from raylite.serve.config import AutoscalingConfig, DeploymentConfig, HTTPOptions, LoggingConfig


def test_plain_defaults_match_the_pydantic_models():
    assert {k: v for k, v in DeploymentConfig().model_dump().items()} == options.DEPLOYMENT_DEFAULTS
    assert AutoscalingConfig().model_dump() == options.AUTOSCALING_DEFAULTS
    assert LoggingConfig().model_dump() == options.LOGGING_DEFAULTS
    http = HTTPOptions().model_dump()
    http["location"] = http["location"].value
    assert http == options.HTTP_DEFAULTS


def test_deployment_config_validation_names_the_field():
    cfg = options.deployment_config({"num_replicas": "auto", "autoscaling_config": {"max_replicas": 7}})
    assert cfg["num_replicas"] is None
    assert cfg["autoscaling_config"]["max_replicas"] == 7 and cfg["autoscaling_config"]["min_replicas"] == 1
    cfg = options.deployment_config({"autoscaling_config": AutoscalingConfig(min_replicas=0, max_replicas=2)})
    assert cfg["autoscaling_config"]["min_replicas"] == 0
    with pytest.raises(ValueError, match="max_ongoing_requests"):
        options.deployment_config({"max_ongoing_requests": 0})
    with pytest.raises(ValueError, match="min_replicas .* must not exceed max_replicas"):
        options.deployment_config({"autoscaling_config": {"min_replicas": 5, "max_replicas": 2}})
    with pytest.raises(ValueError, match="unknown field"):
        options.deployment_config({"autoscaling_config": {"max_replica": 2}})
    with pytest.raises(ValueError, match="encoding"):
        options.deployment_config({"logging_config": {"encoding": "XML"}})
    with pytest.raises(ValueError, match="port"):
        options.http_options({"port": 70000})
    assert options.http_options({"location": "HeadOnly"})["location"] == "HeadOnly"
    with pytest.raises(ValueError, match="proxy_location"):
        options.proxy_location("Everywhere")


def test_decorator_rejects_bad_options():
    from raylite import serve

    with pytest.raises(ValueError, match="num_replicas"):
        serve.deployment(num_replicas=-1)
    with pytest.raises(ValueError, match="autoscaling_config is provided"):
        serve.deployment(num_replicas=2, autoscaling_config={"max_replicas": 3})
    with pytest.raises(ValueError, match="ray_actor_options has invalid key"):
        serve.deployment(ray_actor_options={"num_gpu": 1})
    with pytest.raises(TypeError, match="unknown deployment option"):
        serve.deployment(replicas=2)

    @serve.deployment(max_ongoing_requests=7)
    class A:
        pass

    assert A.name == "A" and A.max_ongoing_requests == 7
    B = A.options(name="B", num_replicas="auto")
    assert B.name == "B" and B.autoscaling_config.max_replicas == 100
    with pytest.raises(RuntimeError, match="bind"):
        A()
    with pytest.raises(TypeError, match="bind"):
        serve.run(A)


def test_overrides_by_deployment_name():
    from raylite import serve
    from raylite.serve.application import build_app

    @serve.deployment
    class Leaf:
        pass

    @serve.deployment
    class Root:
        def __init__(self, leaf) -> None:
            pass

    app = Root.bind(Leaf.bind())._with_overrides({"Leaf": {"num_replicas": 3, "user_config": {"a": 1}}})
    targets, ingress = build_app(app, "x")
    assert ingress == "Root" and targets["Leaf"]["config"]["num_replicas"] == 3
    assert targets["Leaf"]["config"]["user_config"] == {"a": 1}
    with pytest.raises(ValueError, match="Nope"):
        Root.bind(Leaf.bind())._with_overrides({"Nope": {"num_replicas": 1}})


def _dep(target: int, versions: list[tuple[str, str]], config: dict | None = None) -> DeploymentRecord:
    dep = DeploymentRecord("a", "d", {"version": "v2", "config": config or {}})
    dep.target_replicas = target
    for i, (version, state) in enumerate(versions):
        dep.replicas[f"r{i}"] = ReplicaRecord(f"r{i}", f"n{i}", version, state, started_at=float(i))
    return dep


def test_rolling_update_never_exceeds_the_target_by_default():
    # as Ray (max_surge_percent 0): a batch of old replicas stops before new ones start, so an
    # update fits a cluster that has room for exactly the target
    to_start, to_stop = plan(_dep(2, [("v1", RUNNING), ("v1", RUNNING)]))
    assert to_start == 1 and [r.replica_id for r in to_stop] == ["r0"]
    # while the replacement starts, nothing more changes
    to_start, to_stop = plan(_dep(2, [("v1", RUNNING), ("v1", STOPPING), ("v2", STARTING)]))
    assert to_start == 0 and to_stop == []
    # once it runs, the next old one goes
    to_start, to_stop = plan(_dep(2, [("v1", RUNNING), ("v2", RUNNING)]))
    assert to_start == 1 and [r.version for r in to_stop] == ["v1"]
    # rolling_update_percentage sets the batch: half of 4 at a time
    to_start, to_stop = plan(_dep(4, [("v1", RUNNING)] * 4, {"rolling_update_percentage": 0.5}))
    assert to_start == 2 and len(to_stop) == 2
    # scale down: the newest extra goes
    to_start, to_stop = plan(_dep(1, [("v2", RUNNING), ("v2", RUNNING)]))
    assert to_start == 0 and [r.replica_id for r in to_stop] == ["r1"]


def test_rolling_update_with_surge_keeps_capacity():
    surge = {"max_surge_percent": 100}
    to_start, to_stop = plan(_dep(2, [("v1", RUNNING), ("v1", RUNNING)], surge))
    assert to_start == 2 and to_stop == []
    to_start, to_stop = plan(_dep(2, [("v1", RUNNING), ("v1", RUNNING), ("v2", RUNNING), ("v2", STARTING)], surge))
    assert to_start == 0 and len(to_stop) == 1 and to_stop[0].version == "v1"


def test_gang_deployments_start_and_stop_whole_gangs():
    gang = {"gang_scheduling_config": {"gang_size": 2}}
    assert plan(_dep(4, [], gang))[0] == 4
    dep = _dep(2, [("v2", RUNNING)] * 4, gang)
    for i, rec in enumerate(dep.replicas.values()):
        rec.gang_id = f"g{i // 2}"
    to_start, to_stop = plan(dep)
    assert to_start == 0 and sorted(r.gang_id for r in to_stop) == ["g1", "g1"]


def test_frames_split_and_join():
    out = []
    proto = wire.FrameProtocol(lambda _p, m: out.append(m))
    proto._authenticated()  # past the handshake (tests/security/test_serve_channel.py covers it)
    data = wire.encode((1, "a")) + wire.encode((2, b"x" * 100000)) + wire.encode((3, None))
    for i in range(0, len(data), 777):
        proto.data_received(data[i:i + 777])
    assert out == [(1, "a"), (2, b"x" * 100000), (3, None)]
    out.clear()
    proto.data_received(data)
    assert [m[0] for m in out] == [1, 2, 3]


def test_percentile():
    assert percentile([], 0.5) == 0.0
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile(list(map(float, range(101))), 0.99) == pytest.approx(99.0)


def test_missing_http_parser_is_an_install_hint(monkeypatch):
    import sys

    import pytest

    from raylite import serve

    monkeypatch.setitem(sys.modules, "httptools", None)  # as if raylite[serve] was not installed
    with pytest.raises(ImportError, match=r"pip install 'raylite\[serve\]'"):
        serve.start(http_options={"port": 1})
