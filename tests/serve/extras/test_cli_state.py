"""What the CLI prints and sends: status YAML shape, config overrides, `serve build` output."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import yaml

import raylite.serve as serve_pkg
from raylite.serve._cli_state import build_config, config_overrides, status_dict
from raylite.serve.schema import parse_config

needs_runtime = pytest.mark.skipif(not hasattr(serve_pkg, "deployment"),
                                   reason="the Serve runtime (branch serve) is not merged here")


@dataclass
class Dep:
    status: str
    status_trigger: str
    replica_states: dict
    message: str = ""
    name: str = ""


@dataclass
class App:
    status: str
    message: str
    last_deployed_time_s: float
    deployments: dict
    name: str = ""
    route_prefix: str | None = None


@dataclass
class Status:
    proxies: dict = field(default_factory=dict)
    applications: dict = field(default_factory=dict)
    target_capacity: float | None = None


def test_status_has_rays_shape():
    status = Status(proxies={"node1": "HEALTHY"}, applications={"default": App(
        "RUNNING", "", 12.5, {"Hello": Dep("HEALTHY", "CONFIG_UPDATE_COMPLETED", {"RUNNING": 2}, "", "Hello")},
        "default", "/")})
    data = status_dict(status)
    assert data == {
        "proxies": {"node1": "HEALTHY"},
        "applications": {"default": {
            "status": "RUNNING", "message": "", "last_deployed_time_s": 12.5,
            "deployments": {"Hello": {"status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED",
                                      "replica_states": {"RUNNING": 2}, "message": ""}}}},
        "target_capacity": None}
    assert list(yaml.safe_load(yaml.safe_dump(data, sort_keys=False))) == ["proxies", "applications",
                                                                           "target_capacity"]


@needs_runtime
def test_config_overrides_merge_actor_options_and_app_runtime_env():
    from raylite import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": {"A": "1"}}})
    class Inner:
        pass

    @serve.deployment(num_replicas=2)
    class Outer:
        def __init__(self, inner):
            self.inner = inner

    app = Outer.bind(Inner.bind())
    config = parse_config({"applications": [{
        "import_path": "m:app", "runtime_env": {"env_vars": {"B": "2"}},
        "deployments": [{"name": "Inner", "ray_actor_options": {"num_cpus": 1}},
                        {"name": "Outer", "num_replicas": 3}]}]})
    overrides = config_overrides(app, config.applications[0])
    assert overrides["Inner"]["ray_actor_options"] == {"num_cpus": 1, "runtime_env": {"env_vars": {"A": "1"}}}
    assert overrides["Outer"] == {"num_replicas": 3, "ray_actor_options": {"runtime_env": {"env_vars": {"B": "2"}}}}
    updated = app._with_overrides(overrides)
    assert updated.deployment.num_replicas == 3

    bad = parse_config({"applications": [{"import_path": "m:app", "deployments": [{"name": "Nope"}]}]})
    with pytest.raises(ValueError, match=r"\['Nope'\].*\['Inner', 'Outer'\]"):
        config_overrides(app, bad.applications[0])


@needs_runtime
def test_build_config_lists_each_deployment_with_its_code_options_and_round_trips():
    from raylite import serve

    @serve.deployment
    class Inner:
        pass

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.25}, version="v1")
    class Outer:
        def __init__(self, inner):
            self.inner = inner

    doc = build_config([("m:app", Outer.bind(Inner.bind()))])
    app = doc["applications"][0]
    assert (app["name"], app["route_prefix"], app["import_path"]) == ("app1", "/", "m:app")
    assert app["deployments"] == [{"name": "Outer", "num_replicas": 2, "ray_actor_options": {"num_cpus": 0.25}},
                                  {"name": "Inner"}]
    parse_config(yaml.safe_load(yaml.safe_dump(doc)))  # what `serve build` writes, `serve run` reads
