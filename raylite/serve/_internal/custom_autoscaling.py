"""Custom autoscaling policies (`autoscaling_config={"policy": {...}}`, Ray 2.5x+).

A policy is a user function (or a class, instantiated once with `policy_kwargs`, whose instance
is called) of an `AutoscalingContext` that returns `(desired_replicas, policy_state)`. As in Ray,
Serve wraps it so that the deployment's config still applies to what it returns:

1. cold start: with no running replica and requests waiting, scale up at once
   (`max(ceil(upscaling_factor), target)`), without asking the policy;
2. `upscaling_factor` / `downscaling_factor` damp the step from the running count; a damped
   shrink that would not move goes one lower;
3. `upscale_delay_s` / `downscale_delay_s` (`downscale_to_zero_delay_s` for 1 -> 0): a change is
   taken only when it has been wanted that long (tracked in the policy state, next to the user's
   own keys), and never below 1 except from 1;
4. the result is rounded up and clamped to [min_replicas, max_replicas].

Worked example (target 2, upscale_delay_s 0): 2 replicas, the policy asks for 5 with
upscaling_factor 0.5 -> 2 + 0.5 * 3 = 3.5 -> 4 replicas.

The policy runs on the controller's event loop (a class-based policy may start tasks there).
Its state dict is handed back on the next tick as `ctx.policy_state`. A policy that raises keeps
the current target and the error is logged.
"""

from __future__ import annotations

import collections
import inspect
import logging
import math
import time
from typing import Any

import cloudpickle

from raylite.serve._internal.autoscaling import AutoscalingPolicy, resolve_config
from raylite.serve._internal.common import (
    AutoscalingContext,
    DeploymentID,
    ReplicaID,
    TimeStampedValue,
)

logger = logging.getLogger("raylite.serve")

DEFAULT_POLICY_NAMES = ("ray.serve.autoscaling_policy:default_autoscaling_policy",
                        "ray.serve.autoscaling_policy:replica_queue_length_autoscaling_policy",
                        "raylite.serve.autoscaling_policy:default_autoscaling_policy",
                        "raylite.serve.autoscaling_policy:replica_queue_length_autoscaling_policy")
_DIRECTION = "__serve_autoscaling_direction"
_SINCE = "__serve_autoscaling_since"


class ConfigView:
    """The deployment's autoscaling config as attributes (what `ctx.config` offers a policy)."""

    def __init__(self, cfg: dict) -> None:
        self.__dict__.update({k: v for k, v in cfg.items() if k != "policy"})
        self.policy = {k: v for k, v in (cfg.get("policy") or {}).items() if k != "serialized_policy"}
        self._knobs = resolve_config(cfg)

    def get_upscaling_factor(self) -> float:
        return self._knobs.upscaling_factor

    def get_downscaling_factor(self) -> float:
        return self._knobs.downscaling_factor

    def get_target_ongoing_requests(self) -> float:
        return self._knobs.target_ongoing_requests


def is_custom(cfg: dict | None) -> bool:
    """Whether an autoscaling config names a policy other than the built-in one."""
    policy = (cfg or {}).get("policy") or {}
    name = policy.get("policy_function")
    named = isinstance(name, str) and bool(name)
    return (bool(policy.get("serialized_policy")) or named) and name not in DEFAULT_POLICY_NAMES


def load_policy(policy: dict) -> Any:
    """The callable to run each tick: the function, or one instance of a policy class."""
    target = policy_target(policy)
    if inspect.isclass(target):
        return target(**(policy.get("policy_kwargs") or {}))
    return target


def policy_target(policy: dict) -> Any:
    """The policy's function or class. One given by its import path is imported here, in the
    controller (as in Ray)."""
    if policy.get("serialized_policy"):
        target = cloudpickle.loads(policy["serialized_policy"])
    else:
        from raylite.serve._internal.options import _import_attr

        target = _import_attr(policy["policy_function"], "autoscaling_config.policy.policy_function")
        if not callable(target):
            raise TypeError(f"autoscaling_config.policy.policy_function {policy['policy_function']!r} "
                            "is not a function or class")
    return target


def check_policies(app: dict) -> None:
    """Deploy time, in the controller: every custom policy the application names (its own and
    its deployments') must load here; ValueError naming the deployment and the cause if not."""
    where = [(f"application {app.get('name')!r}", app.get("autoscaling_policy"))]
    for dname, target in (app.get("deployments") or {}).items():
        cfg = (target.get("config") or {}).get("autoscaling_config")
        if is_custom(cfg):
            where.append((f"deployment {dname!r}", cfg["policy"]))
    for who, policy in where:
        if not policy:
            continue
        try:
            policy_target(policy)
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"The autoscaling policy {policy.get('policy_function')!r} of {who} could "
                             f"not be loaded in the Serve controller: {type(e).__name__}: {e}. The "
                             "controller imports a policy named by its path when the application is "
                             "deployed: make its module importable there (runtime_env working_dir or "
                             "py_modules, or install it on the head node), or pass the function "
                             "itself.") from None


def damp(desired: float, running: int, cfg: ConfigView) -> int:
    """Step 2 above: scale the change from `running` by the up/down factor."""
    if running == 0:
        return math.ceil(desired)
    delta = desired - running
    factor = cfg.get_upscaling_factor() if delta > 0 else cfg.get_downscaling_factor()
    out = math.ceil(running + factor * delta)
    if math.ceil(float(desired)) < running and out == running:
        out -= 1  # damping must not freeze a shrink forever
    return out


def delay(desired: int, target: int, cfg: ConfigView, state: dict, now: float) -> int:
    """Step 3 above: the count to use now; `state` keeps when the current wish began."""
    direction = (desired > target) - (desired < target)
    if direction == 0:
        state[_DIRECTION], state[_SINCE] = 0, None
        return target
    if state.get(_DIRECTION) != direction or state.get(_SINCE) is None:
        state[_DIRECTION], state[_SINCE] = direction, now
    if direction > 0:
        wait_s = cfg.upscale_delay_s
    else:
        to_zero = getattr(cfg, "downscale_to_zero_delay_s", None)
        wait_s = to_zero if target == 1 and to_zero is not None else cfg.downscale_delay_s
        if target != 1:
            desired = max(1, desired)
    if now - state[_SINCE] + 1e-6 >= wait_s:
        state[_DIRECTION], state[_SINCE] = 0, None
        return desired
    return target


class CustomPolicyAutoscaler:
    """Runs a user's policy for one deployment, with the same interface as AutoscalingPolicy."""

    def __init__(self, cfg: dict, app_name: str, deployment_name: str, policy: Any = None) -> None:
        self.cfg = cfg
        self.view = ConfigView(cfg)
        self.deployment_id = DeploymentID(deployment_name, app_name)
        self.requests = AutoscalingPolicy(cfg)  # windows of ongoing/queued request counts
        self.knobs = self.requests.knobs
        self.policy = policy if policy is not None else load_policy(cfg["policy"])
        self.state: dict[str, Any] = {}
        self.custom: dict[str, dict[str, collections.deque]] = {}  # replica -> metric -> samples
        self.last_scale_up: float | None = None
        self.last_scale_down: float | None = None
        self.errors = 0
        self.last_error = ""

    # ---------------------------------------------------------------- metrics in
    def initial_replicas(self) -> int:
        return self.requests.initial_replicas()

    def record_replica_metrics(self, replica_id: str, ongoing: float, now: float) -> None:
        self.requests.record_replica_metrics(replica_id, ongoing, now)

    def record_handle_metrics(self, handle_id: str, queued: float, now: float) -> None:
        self.requests.record_handle_metrics(handle_id, queued, now)

    def record_custom_metrics(self, replica_id: str, metrics: dict, now: float, wall: float | None = None) -> None:
        """A replica's `record_autoscaling_stats()` result ({name: number})."""
        wall = time.time() if wall is None else wall
        per = self.custom.setdefault(replica_id, {})
        for name, value in metrics.items():
            per.setdefault(str(name), collections.deque()).append((now, wall, float(value)))

    def drop_replica(self, replica_id: str) -> None:
        self.requests.drop_replica(replica_id)
        self.custom.pop(replica_id, None)

    # ---------------------------------------------------------------- views for the context
    def _prune(self, now: float) -> None:
        oldest = now - self.knobs.look_back_period_s
        for per in self.custom.values():
            for samples in per.values():
                while samples and samples[0][0] < oldest:
                    samples.popleft()

    def _raw(self, running_ids: list[str]) -> dict[str, dict[ReplicaID, list[TimeStampedValue]]]:
        out: dict[str, dict[ReplicaID, list[TimeStampedValue]]] = {}
        for rid in running_ids:
            for name, samples in self.custom.get(rid, {}).items():
                if samples:
                    out.setdefault(name, {})[ReplicaID.from_replica_tag(rid)] = [
                        TimeStampedValue(wall, value) for _, wall, value in samples]
        return out

    def _aggregated(self, running_ids: list[str]) -> dict[str, dict[ReplicaID, float]]:
        raw = getattr(self.view, "aggregation_function", "mean")
        how = str(getattr(raw, "value", raw) or "mean").lower()
        reduce = {"max": max, "min": min}.get(how, lambda vs: sum(vs) / len(vs))
        return {name: {rid: reduce([s.value for s in series]) for rid, series in per.items()}
                for name, per in self._raw(running_ids).items()}

    def context(self, current_target: int, now: float, running_ids: list[str]) -> AutoscalingContext:
        self._prune(now)
        total = self.requests.total_ongoing(now) or 0.0
        k = self.knobs
        return AutoscalingContext(
            deployment_id=self.deployment_id, deployment_name=self.deployment_id.name,
            app_name=self.deployment_id.app_name, current_num_replicas=len(running_ids),
            target_num_replicas=current_target,
            running_replicas=[ReplicaID.from_replica_tag(r) for r in running_ids],
            total_num_requests=total, total_queued_requests=lambda: self.requests.queued_at_handles(now),
            aggregated_metrics=lambda: self._aggregated(running_ids), raw_metrics=lambda: self._raw(running_ids),
            capacity_adjusted_min_replicas=k.min_replicas, capacity_adjusted_max_replicas=k.max_replicas,
            policy_state=dict(self.state), last_scale_up_time=self.last_scale_up,
            last_scale_down_time=self.last_scale_down, current_time=time.time(), config=self.view)

    # ---------------------------------------------------------------- decision
    def decide(self, current_replicas: int, now: float, running_replicas: int | None = None,
               running_ids: list[str] | None = None) -> int:
        """The replica count to run now (steps 1-4 of the module docstring)."""
        ctx = self.context(current_replicas, now, list(running_ids or []))
        cold = self.cold_start(ctx)
        if cold is not None:
            return self.bounded(cold, current_replicas)
        try:
            out = self.policy(ctx)
            if inspect.isawaitable(out):
                raise TypeError("an autoscaling policy must return (replicas, state), not a coroutine")
            desired, user_state = out if isinstance(out, tuple) else (out, {})
        except Exception as e:  # noqa: BLE001 - a broken policy must not stop the controller
            self.failed(e, current_replicas)
            return current_replicas
        return self.finish(float(desired), user_state, ctx, now)

    def cold_start(self, ctx: AutoscalingContext) -> int | None:
        """Step 1: no replica running and requests waiting -> the count to start at once."""
        if ctx.current_num_replicas == 0 and ctx.total_num_requests > 0:
            return max(math.ceil(self.view.get_upscaling_factor()), ctx.target_num_replicas)
        return None

    def failed(self, error: BaseException, current_replicas: int) -> None:
        self.errors += 1
        self.last_error = f"{type(error).__name__}: {error}"
        logger.error("autoscaling policy of %s raised; keeping %d replicas: %s", self.deployment_id,
                     current_replicas, self.last_error)

    def finish(self, desired_raw: float, user_state: dict | None, ctx: AutoscalingContext, now: float) -> int:
        """Steps 2-4 on what the policy asked for; keeps the policy's state for the next tick."""
        state = dict(user_state or {})
        state[_DIRECTION], state[_SINCE] = self.state.get(_DIRECTION), self.state.get(_SINCE)
        desired = damp(desired_raw, ctx.current_num_replicas, self.view)
        if not (ctx.current_num_replicas == 0 and desired > 0):
            desired = delay(max(0, desired), ctx.target_num_replicas, self.view, state, now)
        self.state = state
        return self.bounded(desired, ctx.target_num_replicas)

    def bounded(self, desired: int, current_replicas: int) -> int:
        k = self.knobs
        final = max(k.min_replicas, min(k.max_replicas, int(desired)))
        if final > current_replicas:
            self.last_scale_up = time.time()
        elif final < current_replicas:
            self.last_scale_down = time.time()
        return final


def decide_for_app(policy: Any, members: dict[str, tuple[CustomPolicyAutoscaler, int, list[str]]],
                   now: float) -> dict[str, int]:
    """An application-level policy: one call with every autoscaling deployment's context
    ({DeploymentID: AutoscalingContext}) returning ({DeploymentID: replicas}, {DeploymentID: state});
    each deployment's config then applies to its number as for a deployment-level policy.
    `members` maps a deployment name to (its autoscaler, its current target, its running replica
    ids); the result maps names to the counts to run now (deployments the policy leaves out keep theirs)."""
    contexts = {}
    for scaler, current, running_ids in members.values():
        ctx = scaler.context(current, now, running_ids)
        ctx.policy_state = dict(scaler.state)
        contexts[scaler.deployment_id] = ctx
    out: dict[str, int] = {name: current for name, (_, current, _) in members.items()}
    try:
        result = policy(contexts)
        decisions, states = result if isinstance(result, tuple) else (result, {})
        decisions, states = dict(decisions or {}), dict(states or {})
    except Exception as e:  # noqa: BLE001
        for scaler, current, _ in members.values():
            scaler.failed(e, current)
        return out
    for name, (scaler, current, _) in members.items():
        ctx = contexts[scaler.deployment_id]
        cold = scaler.cold_start(ctx)
        if cold is not None:
            out[name] = scaler.bounded(cold, current)
        elif scaler.deployment_id in decisions:
            out[name] = scaler.finish(float(decisions[scaler.deployment_id]), states.get(scaler.deployment_id),
                                      ctx, now)
    return out
