"""Ray 2.60's deployment options, by their behaviour over a real cluster: BackpressureConfig,
deployment-scoped actors, gang scheduling, max_replicas_per_node, replica ranks, custom
autoscaling policies fed by replicas' own metrics, and serve.status() in Ray's shapes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import httpx
import pytest

import raylite
from tests.conftest import wait_for


@raylite.remote
class Gate:
    """Holds requests until released (an asyncio.Event in an actor)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiting = 0

    async def wait(self) -> None:
        self.waiting += 1
        await self.event.wait()

    async def count(self) -> int:
        return self.waiting

    async def release(self) -> None:
        self.event.set()


def test_backpressure_config_answers_429_with_retry_after(serve_instance):
    from raylite.serve.config import BackpressureConfig

    serve, url = serve_instance
    gate = Gate.options(num_cpus=0).remote()

    @serve.deployment(max_ongoing_requests=1, max_queued_requests=1,
                      backpressure_config=BackpressureConfig(status_code=429, retry_after_s=2.5))
    class Slow:
        def __init__(self, gate) -> None:
            self.gate = gate

        async def __call__(self) -> str:
            await self.gate.wait.remote()
            return "done"

    serve.run(Slow.bind(gate), name="slow", route_prefix="/slow")
    answers: dict[int, int] = {}

    def call(i: int) -> None:
        answers[i] = httpx.get(f"{url}/slow", timeout=60).status_code

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    threads[0].start()
    wait_for(lambda: raylite.get(gate.count.remote()) == 1, what="the first request to run")
    threads[1].start()  # this one waits in the proxy's queue (max_queued_requests=1)

    def shed() -> httpx.Response | None:
        try:
            r = httpx.get(f"{url}/slow", timeout=1.0)
        except httpx.TimeoutException:
            return None  # it took the queue's place before the second request did; try again
        return r if r.status_code == 429 else None

    r = wait_for(shed, timeout_s=20, what="a request shed with 429")
    assert r.headers["retry-after"] == "3"  # 2.5 s, rounded up to whole seconds
    assert "backpressure" in r.text.lower()
    raylite.get(gate.release.remote())
    for t in threads:
        t.join(30)
    # the first ran; the second ran too, unless a probe above took the queue's place first
    assert answers[0] == 200 and answers[1] in (200, 429)
    serve.delete("slow")


def test_deployment_scoped_actor_is_shared_and_replaced_when_it_dies(serve_instance):
    from raylite.serve.config import DeploymentActorConfig
    from raylite.serve.exceptions import RayServeException

    serve, _ = serve_instance

    @raylite.remote
    class Counter:
        def __init__(self, start: int) -> None:
            self.value = start

        def incr(self) -> int:
            self.value += 1
            return self.value

        def crash(self) -> None:
            import os

            os._exit(1)

    @serve.deployment(num_replicas=2, deployment_actors=[DeploymentActorConfig(
        name="counter", actor_class=Counter, init_kwargs={"start": 10}, actor_options={"num_cpus": 0})])
    class Shared:
        def __init__(self) -> None:
            self.first = serve.get_deployment_actor("counter")  # ready before replicas start

        async def __call__(self, crash: bool = False) -> int:
            counter = serve.get_deployment_actor("counter")
            if crash:
                counter.crash.remote()
                return -1
            return await counter.incr.remote()

        def missing(self) -> str:
            try:
                serve.get_deployment_actor("nope")
            except ValueError as e:
                return str(e)
            return ""

    handle = serve.run(Shared.bind(), name="shared", route_prefix="/shared")
    values = sorted(handle.remote().result() for _ in range(6))
    assert values == list(range(11, 17))  # one counter, whichever replica answered
    assert "nope" in handle.missing.remote().result()
    with pytest.raises(RayServeException, match="within a Serve replica"):
        serve.get_deployment_actor("counter")
    handle.remote(crash=True).result()

    def restarted() -> bool:
        try:
            return handle.remote().result(timeout_s=5) == 11  # a new instance, constructed again
        except Exception:  # noqa: BLE001 - the old handle's actor is gone until the controller replaces it
            return False

    wait_for(restarted, timeout_s=30, what="the deployment actor to be started again")
    serve.delete("shared")
    wait_for(lambda: not [a for a in raylite.util.state.list_actors(filters=[("state", "=", "ALIVE")])
                          if "SERVE_DEPLOYMENT_ACTOR::shared" in (a.name or "")],
             timeout_s=20, what="the deployment actor to stop with its deployment")


def test_gangs_share_a_placement_group_and_restart_together(serve_instance):
    from raylite.placement_group import placement_group_table
    from raylite.serve._internal.client import get_controller
    from raylite.serve.config import GangPlacementStrategy, GangSchedulingConfig

    serve, _ = serve_instance

    @serve.deployment(num_replicas=4, ray_actor_options={"num_cpus": 0.25}, gang_scheduling_config=GangSchedulingConfig(
        gang_size=2, gang_placement_strategy=GangPlacementStrategy.SPREAD))
    class Member:
        def __call__(self) -> tuple:
            import os

            ctx = serve.get_replica_context()
            g = ctx.gang_context
            return g.gang_id, g.rank, g.world_size, tuple(g.member_replica_ids), ctx.replica_tag, os.getpid()

    with pytest.raises(ValueError, match="multiple of gang_size"):
        Member.options(num_replicas=3)
    handle = serve.run(Member.bind(), name="gang", route_prefix="/gang")

    def members() -> dict:
        seen: dict = {}
        for _ in range(40):
            gang_id, rank, size, ids, tag, pid = handle.remote().result()
            seen[tag] = (gang_id, rank, size, ids, pid)
        return seen

    seen = wait_for(lambda: m if len(m := members()) == 4 else None, what="all four replicas answering")
    gangs: dict = {}
    for tag, (gang_id, rank, size, ids, _pid) in seen.items():
        assert size == 2 and ids[rank] == tag  # members listed by rank
        gangs.setdefault(gang_id, set()).add(tag)
    assert sorted(len(v) for v in gangs.values()) == [2, 2]
    groups = {v["name"]: v for v in placement_group_table().values() if v["state"] == "CREATED"}
    assert {f"SERVE_GANG::gang#Member#{g}" for g in gangs} <= set(groups)
    assert all(groups[f"SERVE_GANG::gang#Member#{g}"]["strategy"] == "SPREAD" for g in gangs)

    # RESTART_GANG: one member dies -> its whole gang is replaced; the other gang keeps running
    victim_gang, victims = next(iter(gangs.items()))
    other_gang = next(g for g in gangs if g != victim_gang)
    os.kill(seen[sorted(victims)[0]][4], signal.SIGKILL)

    def replaced() -> bool:
        running = {r["replica_id"] for r in raylite.get(get_controller().list_replicas.remote("gang", "Member"))
                   if r["state"] == "RUNNING"}
        return len(running) == 4 and running != set(seen)

    wait_for(replaced, timeout_s=60, what="the crashed member's gang to be replaced")
    now = members()
    assert set(seen) & set(now) == gangs[other_gang]  # the untouched gang stays whole, the victim's is new
    names = {v["name"] for v in placement_group_table().values() if v["state"] == "CREATED"}
    assert len([n for n in names if n.startswith("SERVE_GANG::gang#")]) == 2  # the dead gang's group is gone
    serve.delete("gang")
    wait_for(lambda: not [v for v in placement_group_table().values()
                          if v["name"].startswith("SERVE_GANG::gang#") and v["state"] == "CREATED"],
             what="the gangs' placement groups to be removed")


def test_max_replicas_per_node_beyond_the_cluster_fails_clearly(serve_instance):
    serve, _ = serve_instance

    @serve.deployment(num_replicas=2, max_replicas_per_node=1, ray_actor_options={"num_cpus": 0.5})
    class OnePerNode:
        def __call__(self) -> str:
            return "ok"

    with pytest.raises(RuntimeError, match=r"max_replicas_per_node=1.*1 node"):
        serve.run(OnePerNode.bind(), name="per_node", route_prefix="/per_node", timeout_s=60)
    serve.delete("per_node")
    handle = serve.run(OnePerNode.options(num_replicas=1).bind(), name="per_node", route_prefix="/per_node")
    assert handle.remote().result() == "ok"
    with pytest.raises(ValueError, match="max_replicas_per_node"):
        OnePerNode.options(max_replicas_per_node=0)
    serve.delete("per_node")


def test_replica_ranks_and_reconfigure_with_rank(serve_instance):
    serve, _ = serve_instance

    @serve.deployment(num_replicas=3, user_config={"name": "v1"})
    class Ranked:
        def __init__(self) -> None:
            self.seen = None

        def reconfigure(self, user_config: dict, rank) -> None:
            self.seen = (user_config["name"], rank.rank)

        def __call__(self) -> tuple:
            ctx = serve.get_replica_context()
            return ctx.rank.rank, ctx.rank.local_rank, ctx.rank.node_rank, ctx.world_size, self.seen

    handle = serve.run(Ranked.bind(), name="ranked", route_prefix="/ranked")
    answers = wait_for(lambda: a if len(a := {handle.remote().result() for _ in range(40)}) == 3 else None,
                       what="all three replicas")
    assert sorted(a[0] for a in answers) == [0, 1, 2]
    assert all(a[1] == a[0] and a[2] == 0 and a[3] == 3 and a[4] == ("v1", a[0]) for a in answers)
    serve.delete("ranked")


def test_status_uses_ray_schema_models(serve_instance):
    from raylite.serve.schema import (
        ApplicationStatus,
        ApplicationStatusOverview,
        DeploymentStatusOverview,
        ReplicaState,
        ServeStatus,
    )

    serve, _ = serve_instance

    @serve.deployment(num_replicas=2)
    def hello() -> str:
        return "hi"

    serve.run(hello.bind(), name="st", route_prefix="/st")
    status = serve.status()
    assert isinstance(status, ServeStatus)
    app = status.applications["st"]
    assert isinstance(app, ApplicationStatusOverview) and app.status == ApplicationStatus.RUNNING == "RUNNING"
    dep = app.deployments["hello"]
    assert isinstance(dep, DeploymentStatusOverview) and dep.status == "HEALTHY"
    assert dep.replica_states == {ReplicaState.RUNNING: 2} and dep.replica_states["RUNNING"] == 2
    assert dep.status_trigger == "CONFIG_UPDATE_COMPLETED" and app.last_deployed_time_s > 0
    assert set(vars(app)) == {"status", "message", "last_deployed_time_s", "deployments"}
    serve.delete("st")
