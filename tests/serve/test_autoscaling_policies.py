"""Custom autoscaling policies (Ray 2.5x+): a user function or class of the deployment's metrics,
including metrics the replicas record themselves, decides the replica count."""

from __future__ import annotations

import asyncio

import pytest

import raylite
from tests.conftest import wait_for


def load_policy(ctx) -> tuple[int, dict]:
    """Scale to the highest 'load' any replica reports (1..3), remembering how often it ran."""
    per_replica = ctx.aggregated_metrics.get("load", {})
    wanted = int(max(per_replica.values())) if per_replica else ctx.current_num_replicas
    state = dict(ctx.policy_state)
    state["ticks"] = state.get("ticks", 0) + 1
    assert ctx.deployment_id.name == "Loaded" and ctx.app_name == "policy"
    assert all(r.deployment_id.name == "Loaded" for r in ctx.running_replicas)
    return wanted, state


class StepPolicy:
    """A class policy: built once with policy_kwargs; its instance is called every tick."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.calls = 0

    def __call__(self, ctx) -> tuple[int, dict]:
        self.calls += 1
        return self.replicas, {"calls": self.calls}


@raylite.remote(num_cpus=0)
class Load:
    def __init__(self) -> None:
        self.value = 1.0

    def set(self, value: float) -> None:
        self.value = value

    def get(self) -> float:
        return self.value


def test_function_policy_scales_on_metrics_that_replicas_record(serve_instance):
    from raylite.serve._internal.client import get_controller

    serve, _ = serve_instance
    load = Load.remote()

    @serve.deployment(ray_actor_options={"num_cpus": 0.25}, autoscaling_config={
        "min_replicas": 1, "max_replicas": 3, "upscale_delay_s": 0, "downscale_delay_s": 0,
        "look_back_period_s": 1.0, "metrics_interval_s": 0.5,
        "policy": {"policy_function": "tests.serve.test_autoscaling_policies:load_policy"}})
    class Loaded:
        def __init__(self, load) -> None:
            self.load = load

        async def record_autoscaling_stats(self) -> dict:
            return {"load": await self.load.get.remote()}

        def __call__(self) -> str:
            return "ok"

    handle = serve.run(Loaded.bind(load), name="policy", route_prefix="/policy")
    assert handle.remote().result() == "ok"

    def running() -> int:
        replicas = raylite.get(get_controller().list_replicas.remote("policy", "Loaded"))
        return sum(r["state"] == "RUNNING" for r in replicas)

    raylite.get(load.set.remote(3.0))
    wait_for(lambda: running() == 3, timeout_s=30, what="three replicas for load 3")
    raylite.get(load.set.remote(7.0))  # beyond max_replicas: clamped
    raylite.get(load.set.remote(1.0))
    wait_for(lambda: running() == 1, timeout_s=30, what="one replica again for load 1")
    serve.delete("policy")


def test_class_policy_with_kwargs_given_as_an_object(serve_instance):
    from raylite.serve._internal.client import get_controller
    from raylite.serve.config import AutoscalingConfig, AutoscalingPolicy

    serve, _ = serve_instance

    @serve.deployment(ray_actor_options={"num_cpus": 0.25}, autoscaling_config=AutoscalingConfig(
        min_replicas=1, max_replicas=4, upscale_delay_s=0,
        policy=AutoscalingPolicy(policy_function=StepPolicy, policy_kwargs={"replicas": 2})))
    def stepped() -> str:
        return "ok"

    serve.run(stepped.bind(), name="stepped", route_prefix="/stepped")
    wait_for(lambda: sum(r["state"] == "RUNNING" for r in raylite.get(
        get_controller().list_replicas.remote("stepped", "stepped"))) == 2, timeout_s=30, what="two replicas")
    serve.delete("stepped")


def test_policy_options_are_checked_when_the_deployment_is_declared(serve_instance):
    serve, _ = serve_instance
    with pytest.raises(ValueError, match="import path like"):
        serve.deployment(autoscaling_config={"policy": {"policy_function": "no_module_named"}})
    with pytest.raises(ValueError, match="JSON-serializable"):
        serve.deployment(autoscaling_config={"policy": {"policy_function": StepPolicy,
                                                        "policy_kwargs": {"x": object()}}})
    with pytest.raises(ValueError, match="unknown field"):
        serve.deployment(autoscaling_config={"policy": {"policy_fn": "x:y"}})


def test_the_wrapper_applies_the_config_around_the_policy():
    from raylite.serve._internal.custom_autoscaling import CustomPolicyAutoscaler

    asks = {"n": 5}

    def policy(ctx):
        return asks["n"], {"mine": 1}

    cfg = {"min_replicas": 1, "max_replicas": 4, "upscale_delay_s": 10, "downscale_delay_s": 20,
           "upscaling_factor": 0.5, "look_back_period_s": 30}
    scaler = CustomPolicyAutoscaler(cfg, "app", "dep", policy=policy)
    running = ["app#dep#a", "app#dep#b"]
    for rid in running:
        scaler.record_replica_metrics(rid, 1.0, now=0.0)
    # wanted 5 from 2 running, damped by 0.5 -> 2 + 1.5 -> 4; the upscale delay holds it first
    assert scaler.decide(2, now=0.0, running_ids=running) == 2
    assert scaler.state["mine"] == 1  # the policy's own state is kept next to the delay's
    assert scaler.decide(2, now=9.0, running_ids=running) == 2
    assert scaler.decide(2, now=10.0, running_ids=running) == 4
    asks["n"] = 1
    assert scaler.decide(4, now=11.0, running_ids=running) == 4  # downscale delay
    assert scaler.decide(4, now=31.0, running_ids=running) == 1
    # cold start: no replica running and requests waiting -> scale up at once, without the policy
    scaler.record_handle_metrics("h", 3.0, now=32.0)
    assert scaler.decide(0, now=32.0, running_ids=[]) == 1


def test_a_policy_that_raises_keeps_the_count():
    from raylite.serve._internal.custom_autoscaling import CustomPolicyAutoscaler

    def broken(ctx):
        raise RuntimeError("bad policy")

    scaler = CustomPolicyAutoscaler({"min_replicas": 1, "max_replicas": 3}, "a", "d", policy=broken)
    scaler.record_replica_metrics("a#d#x", 1.0, now=0.0)
    assert scaler.decide(2, now=0.0, running_ids=["a#d#x"]) == 2
    assert scaler.errors == 1 and "bad policy" in scaler.last_error


def test_class_policy_may_use_the_controller_loop():
    from raylite.serve._internal.custom_autoscaling import CustomPolicyAutoscaler

    class Background:
        def __init__(self) -> None:
            self.task = None

        def __call__(self, ctx):
            if self.task is None:
                self.task = asyncio.get_running_loop().create_task(asyncio.sleep(0))
            return 2, {}

    async def tick() -> int:
        scaler = CustomPolicyAutoscaler({"min_replicas": 1, "max_replicas": 3, "upscale_delay_s": 0}, "a", "d",
                                        policy=Background())
        scaler.record_replica_metrics("a#d#x", 1.0, now=0.0)
        return scaler.decide(1, now=0.0, running_ids=["a#d#x"])

    assert asyncio.run(tick()) == 2


def coordinated_policy(contexts) -> tuple[dict, dict]:
    """Application level: Model gets twice the replicas of Pre; Pre follows its own 'load' metric."""
    by_name = {d.name: (d, ctx) for d, ctx in contexts.items()}
    pre_id, pre = by_name["Pre"]
    model_id, _ = by_name["Model"]
    load = pre.aggregated_metrics.get("load", {})
    pre_n = int(max(load.values())) if load else pre.current_num_replicas
    return {pre_id: pre_n, model_id: 2 * pre_n}, {pre_id: {"seen": pre_n}}


def test_application_level_policy_decides_for_all_deployments(serve_instance):
    from raylite.serve._internal.client import get_controller
    from raylite.serve.schema import parse_config

    serve, _ = serve_instance
    load = Load.remote()
    scaling = {"min_replicas": 1, "max_replicas": 4, "upscale_delay_s": 0, "downscale_delay_s": 0,
               "look_back_period_s": 1.0}

    @serve.deployment(ray_actor_options={"num_cpus": 0.25}, autoscaling_config=scaling)
    class Pre:
        def __init__(self, load) -> None:
            self.load = load

        async def record_autoscaling_stats(self) -> dict:
            return {"load": await self.load.get.remote()}

        def __call__(self) -> str:
            return "pre"

    @serve.deployment(ray_actor_options={"num_cpus": 0.25}, autoscaling_config=scaling)
    class Model:
        def __call__(self) -> str:
            return "model"

    @serve.deployment(ray_actor_options={"num_cpus": 0.25})
    class Front:
        def __init__(self, pre, model) -> None:
            self.pre, self.model = pre, model

        async def __call__(self) -> str:
            return await self.pre.remote() + await self.model.remote()

    policy = {"policy_function": "tests.serve.test_autoscaling_policies:coordinated_policy"}
    handle = serve.run(Front.bind(Pre.bind(load), Model.bind()), name="coord", route_prefix="/coord",
                       _autoscaling_policy=policy)
    assert handle.remote().result() == "premodel"

    def running(dname: str) -> int:
        return sum(r["state"] == "RUNNING" for r in raylite.get(get_controller().list_replicas.remote("coord", dname)))

    wait_for(lambda: running("Pre") == 1 and running("Model") == 2, timeout_s=30, what="1 Pre, 2 Model")
    raylite.get(load.set.remote(2.0))
    wait_for(lambda: running("Pre") == 2 and running("Model") == 4, timeout_s=30, what="2 Pre, 4 Model")
    assert running("Front") == 1  # no autoscaling_config: not the policy's to scale
    serve.delete("coord")
    app = parse_config({"applications": [{"import_path": "m:app", "autoscaling_policy": policy}]}).applications[0]
    assert app.autoscaling_policy == policy


_CONTROLLER_ONLY = """
import os, sys
here = os.environ["POLICY_DIR"]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
import importlib.util
assert importlib.util.find_spec("controller_only_policy") is None  # not importable here
import raylite
from raylite import serve

raylite.init(num_cpus=4)
serve.start(http_options={"host": "127.0.0.1", "port": int(os.environ["SERVE_PORT"])})

@serve.deployment(autoscaling_config={"min_replicas": 1, "max_replicas": 2,
                                      "policy": {"policy_function": "controller_only_policy:policy"}})
class Named:
    def __call__(self):
        return "served"

@serve.deployment(autoscaling_config={"min_replicas": 1, "max_replicas": 2,
                                      "policy": {"policy_function": "no_such_policy_module:policy"}})
class Missing:
    def __call__(self):
        return "never"

print("declared")
print(serve.run(Named.bind(), name="named", route_prefix="/named").remote().result(timeout_s=60))
try:
    serve.run(Missing.bind(), name="missing", route_prefix="/missing")
except ValueError as e:
    print("refused:", e)
serve.shutdown()
raylite.shutdown()
"""


def test_policy_named_by_path_is_imported_by_the_controller_at_deploy_time(tmp_path):
    """As in Ray: the decorator does not import a policy named by its path; the controller
    imports it when the application is deployed, so its module may exist only where the
    controller runs, and one that cannot be imported fails the deploy with a clear error."""
    import os
    import subprocess
    import sys

    from tests.serve.conftest import free_port

    policy_dir = tmp_path / "controller_side"
    policy_dir.mkdir()
    (policy_dir / "controller_only_policy.py").write_text(
        "def policy(ctx):\n    return 1, {}\n")
    script = tmp_path / "main.py"
    script.write_text(_CONTROLLER_ONLY)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "POLICY_DIR": str(policy_dir), "SERVE_PORT": str(free_port()),
           "PYTHONPATH": os.pathsep.join([root, str(policy_dir), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["declared", "served"], out.stdout + out.stderr[-2000:]
    refused = out.stdout.partition("refused:")[2]
    assert "no_such_policy_module:policy" in refused and "deployment 'Missing'" in refused
    assert "could not be loaded in the Serve controller" in refused
