"""raylite.util.state and `raylite list/get/summary` over the HTTP API, with Ray's field names."""

from __future__ import annotations

import json
import os

import pytest
import yaml

import raylite
from raylite.util import state
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)


@raylite.remote
def square(x):
    return x * x


@raylite.remote(max_retries=0)
def explode():
    raise ValueError("kaboom from a task")


@raylite.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        print("counter at", self.n)
        return self.n


@pytest.fixture(scope="module")
def work(api):
    counter = Counter.options(name="the-counter").remote()
    assert raylite.get([counter.incr.remote() for _ in range(3)]) == [1, 2, 3]
    assert raylite.get([square.remote(i) for i in range(5)]) == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError):
        raylite.get(explode.remote())
    pg = raylite.util.placement_group([{"CPU": 0.1}], name="the-pg")
    raylite.get(pg.ready())
    # task events reach the head about once a second
    def settled() -> bool:
        tasks = state.list_tasks(limit=10000)
        names = [t.func_or_class_name for t in tasks if t.state in ("FINISHED", "FAILED")]
        return names.count("square") == 5 and names.count("explode") == 1 and names.count("Counter.incr") == 3

    wait_for(settled, 30, 0.2, "task events to reach the head")
    return {"counter": counter, "pg": pg}


def test_list_actors_nodes_workers_pgs(api, work):
    actors = state.list_actors()
    (actor,) = [a for a in actors if a.name == "the-counter"]
    assert isinstance(actor, state.ActorState)
    assert actor["class_name"] == actor.class_name == "Counter" and actor.state == "ALIVE"
    assert actor.pid > 0 and actor.node_id and actor.job_id and actor.ray_namespace
    (node,) = state.list_nodes()
    assert node.state == "ALIVE" and node.is_head_node and node.resources_total["CPU"] == 2
    workers = state.list_workers()
    assert {w.worker_type for w in workers} >= {"DRIVER", "WORKER"}
    assert os.getpid() in [w.pid for w in workers]
    (pg,) = [p for p in state.list_placement_groups() if p.name == "the-pg"]
    assert pg.state == "CREATED" and pg.bundles[0]["unit_resources"] == {"CPU": 0.1}
    jobs = state.list_jobs()
    assert any(j.type == "DRIVER" and j.status == "RUNNING" for j in jobs)


def test_tasks_have_states_nodes_pids_times_and_errors(api, work):
    # the owner's FINISHED and the worker's RUNNING (with its node and pid) reach the head in two
    # batches, in either order: the rows are whole once both have (Ray's state API is as eventual)
    def whole():
        rows = state.list_tasks(limit=10000)
        squares = [t for t in rows if t.name == "square"]
        return rows if len(squares) == 5 and all(t.worker_pid for t in squares) else None

    tasks = wait_for(whole, timeout_s=30, what="both events of every square task")
    done = [t for t in tasks if t.name == "square"]
    for t in done:
        assert t.state == "FINISHED" and t.type == "NORMAL_TASK" and t.node_id and t.worker_pid
        assert t.creation_time_ms <= t.start_time_ms <= t.end_time_ms
        states = [e["state"] for e in t.events]
        assert states[0] == "PENDING_NODE_ASSIGNMENT" and "RUNNING" in states and states[-1] == "FINISHED"
    (failed,) = [t for t in tasks if t.name == "explode"]
    assert failed.state == "FAILED" and failed.error_type == "TASK_EXECUTION_EXCEPTION"
    assert "kaboom from a task" in failed.error_message
    calls = [t for t in tasks if t.func_or_class_name == "Counter.incr"]
    assert len(calls) == 3 and all(c.type == "ACTOR_TASK" and c.actor_id for c in calls)
    assert any(t.type == "ACTOR_CREATION_TASK" for t in tasks)


def test_task_waiting_for_its_args_is_pending_args_avail(api, work):
    import time

    @raylite.remote
    def slow():
        time.sleep(1.5)
        return 2

    ref = square.options(name="waits-for-slow").remote(slow.remote())
    (pending,) = wait_for(lambda: state.list_tasks(filters=[("name", "=", "waits-for-slow")]), 60, 0.2,
                          "the pending task to be reported")
    assert pending.state in ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED")
    assert raylite.get(ref) == 4
    done = wait_for(lambda: [t for t in state.list_tasks(filters=[("name", "=", "waits-for-slow")])
                             if t.state == "FINISHED"], 60, 0.2, "the task to finish")
    assert [e["state"] for e in done[0].events][0] == "PENDING_ARGS_AVAIL"


def test_filters_limit_get_and_errors(api, work):
    assert all(t.state == "FAILED" for t in state.list_tasks(filters=[("state", "=", "failed")]))
    assert all(t.state != "FINISHED" for t in state.list_tasks(filters=[("state", "!=", "FINISHED")]))
    assert len(state.list_tasks(limit=2)) == 2
    actor = state.list_actors(filters=[("name", "=", "the-counter")])[0]
    assert state.get_actor(actor.actor_id).name == "the-counter"
    assert state.get_actor("00" * 16) is None
    task = state.list_tasks(limit=1)[0]
    assert state.get_task(task.task_id).task_id == task.task_id
    with pytest.raises(ValueError, match="cannot filter actors by 'colour'.*class_name"):
        state.list_actors(filters=[("colour", "=", "red")])
    with pytest.raises(ValueError, match="unsupported filter predicate"):
        state.list_actors(filters=[("state", ">", "x")])


def test_summaries(api, work):
    tasks = state.summarize_tasks()["node_id_to_summary"]["cluster"]
    assert tasks["summary"]["square"]["state_counts"]["FINISHED"] >= 5
    assert tasks["summary"]["explode"]["state_counts"] == {"FAILED": 1}
    actors = state.summarize_actors()["node_id_to_summary"]["cluster"]
    assert actors["summary"]["Counter"]["state_counts"]["ALIVE"] >= 1


def test_cli_list_get_summary(api, work):
    r = api.cli("list", "actors", check=True)
    assert "the-counter" in r.stdout and "CLASS_NAME" in r.stdout
    r = api.here("list", "tasks", "--filter", "name=square", "--format", "json", check=True)
    rows = json.loads(r.stdout)
    assert len(rows) == 5 and {row["state"] for row in rows} == {"FINISHED"}
    r = api.here("list", "placement-groups", "--format", "yaml", "--detail", check=True)
    assert yaml.safe_load(r.stdout)[0]["name"] == "the-pg"
    actor_id = state.list_actors(filters=[("name", "=", "the-counter")])[0].actor_id
    r = api.cli("get", "actors", actor_id, check=True)
    assert yaml.safe_load(r.stdout)["class_name"] == "Counter"
    r = api.here("summary", "tasks", check=True)
    assert "square" in r.stdout and "FINISHED: " in r.stdout


def test_cli_bad_input(api, work):
    r = api.here("get", "actors", "ffff0000")
    assert r.returncode == 1 and "ffff0000" in r.stderr and "not found" in r.stderr
    r = api.here("list", "tasks", "--filter", "colour=red")
    assert r.returncode == 1 and "cannot filter tasks by 'colour'" in r.stderr
    env_bad = api.env() | {"RAYLITE_TOKEN": "wrong"}
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "raylite.cli", "list", "actors"], capture_output=True, text=True,
                       env=env_bad, timeout=60)
    assert r.returncode == 1 and "401" in r.stderr


def test_func_or_class_name_is_rays_short_form_for_classes_and_functions_defined_inside_a_function(api):
    def define():
        @raylite.remote(num_cpus=0)
        class Inner:
            def ping(self):
                return 1

        @raylite.remote
        def helper():
            return 2

        return Inner, helper

    inner_cls, helper = define()
    inner = inner_cls.remote()
    assert raylite.get([inner.ping.remote(), helper.remote()]) == [1, 2]
    wait_for(lambda: {"Inner.ping", "helper", "Inner.__init__"} <= {
        t.func_or_class_name for t in state.list_tasks(limit=10000)}, what="the three tasks' rows")
    assert state.list_tasks(filters=[("func_or_class_name", "=", "Inner.ping")])
    raylite.kill(inner)
