"""One state server, two clients: Ray's state client (it sends `timeout=`) gets rows its strict
schemas accept, while raylite's own `raylite.util.state` and `raylite list` keep working."""

from __future__ import annotations

import pytest

import raylite
from raylite.util import state
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)


@raylite.remote
class Doomed:
    def ping(self):
        return "pong"


@raylite.remote
class Summarized:
    def ping(self):
        return "pong"


def _rows(c, resource: str, **params) -> list[dict]:
    r = c.get(f"/api/v0/{resource}", params=params)
    assert r.status_code == 200, r.text
    return r.json()["data"]["result"]["result"]


def test_death_cause_is_rays_dict_for_both_clients(api):
    doomed = Doomed.options(name="doomed").remote()
    raylite.get(doomed.ping.remote())
    raylite.kill(doomed)

    def dead():
        return [a for a in state.list_actors(detail=True) if a.name == "doomed" and a.state == "DEAD"]

    (actor,) = wait_for(dead, 60, what="the killed actor DEAD")
    context = actor.death_cause["actor_died_error_context"]
    assert context["class_name"] == "Doomed" and context["error_message"]
    with api.client() as c:
        (row,) = [a for a in _rows(c, "actors", timeout=30) if a["name"] == "doomed"]
        assert row["death_cause"]["actor_died_error_context"]["reason"] == "RAY_KILL"


def test_drivers_hidden_from_rays_worker_list_only(api):
    raylite.get(raylite.remote(lambda: 1).remote())
    with api.client() as c:
        mine = {w["worker_type"] for w in _rows(c, "workers")}
        rays = {w["worker_type"] for w in _rows(c, "workers", timeout=30)}
        everything = {w["worker_type"] for w in _rows(c, "workers", timeout=30, exclude_driver="false")}
    assert "DRIVER" in mine and "DRIVER" in everything and "DRIVER" not in rays


def test_summaries_come_in_rays_wrapper_and_raylite_unwraps_them(api):
    raylite.get([raylite.remote(lambda i: i).remote(i) for i in range(3)])
    with api.client() as c:
        body = c.get("/api/v0/tasks/summarize", params={"timeout": 30}).json()["data"]["result"]
    assert {"result", "total", "num_after_truncation", "num_filtered", "partial_failure_warning"} <= set(body)
    assert "node_id_to_summary" in body["result"]
    assert "cluster" in state.summarize_tasks()["node_id_to_summary"]
    kept = Summarized.remote()
    raylite.get(kept.ping.remote())
    assert "Summarized" in api.here("summary", "actors", check=True).stdout  # raylite's CLI
