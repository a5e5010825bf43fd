"""Pure parts of Ray-compatibility on the head: auth settings from Ray's environment variables,
the header and cookie Ray's clients send, the Serve REST details shape, and state rows as Ray's
client validates them (no cluster)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from raylite._core.config import NO_AUTH_TOKEN, AuthConfigError, Config, no_auth_refusal
from raylite.dashboard import ray_shapes
from raylite.dashboard.auth import TokenAuth
from raylite.serve._internal import rest_details
from raylite.serve._internal.rest_agent import capacity_adjusted


def test_token_comes_from_rays_variables_only_in_token_mode(tmp_path):
    assert Config.from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": " t1 \n"}).token == "t1"
    path = tmp_path / "tok"
    path.write_text("t2\n")
    c = Config.from_env({"RAY_AUTH_MODE": "TOKEN", "RAY_AUTH_TOKEN_PATH": str(path)})
    assert (c.token, c.token_source) == ("t2", "RAY_AUTH_TOKEN_PATH")
    # RAYLITE_TOKEN wins; without RAY_AUTH_MODE=token Ray's token is ignored (as Ray does)
    assert Config.from_env({"RAYLITE_TOKEN": "mine", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "x"}).token == "mine"
    assert Config.from_env({"RAY_AUTH_TOKEN": "x"}).token == ""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("t3\n")  # Ray's default file, last in line
    assert Config.from_env({"RAY_AUTH_MODE": "token", "HOME": str(home)}).token == "t3"
    assert Config.from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t1", "HOME": str(home)}).token == "t1"
    assert Config.from_env({"HOME": str(home)}).token == ""
    with pytest.raises(AuthConfigError, match="RAY_AUTH_TOKEN_PATH"):
        Config.from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})
    with pytest.raises(AuthConfigError, match="is not one of"):
        Config.from_env({"RAY_AUTH_MODE": "off"})


def test_auth_disabled_needs_the_explicit_opt_in():
    closed = Config.from_env({"RAY_AUTH_MODE": "disabled"})
    assert closed.token == "" and not closed.auth_disabled and "RAYLITE_ALLOW_NO_AUTH=1" in no_auth_refusal(closed)
    opened = Config.from_env({"RAY_AUTH_MODE": "disabled", "RAYLITE_ALLOW_NO_AUTH": "1"})
    assert opened.auth_disabled and opened.token == NO_AUTH_TOKEN and no_auth_refusal(opened) == ""
    assert no_auth_refusal(Config.from_env({})) == ""


def _client(no_auth: bool = False) -> TestClient:
    inner = Starlette(routes=[Route("/x", lambda r: PlainTextResponse("ok"))])
    return TestClient(TokenAuth(inner, "s3cret", no_auth=no_auth))


@pytest.mark.parametrize("headers", [{"x-ray-authorization": "Bearer s3cret"},
                                     {"Cookie": "ray-authentication-token=s3cret"},
                                     {"Authorization": "Basic Zm9v", "X-Ray-Authorization": "Bearer s3cret"}])
def test_rays_header_and_cookie_are_accepted(headers):
    assert _client().get("/x", headers=headers).status_code == 200


@pytest.mark.parametrize("headers", [{"x-ray-authorization": "Bearer nope"}, {"x-ray-authorization": "s3cret"},
                                     {"Cookie": "ray-authentication-token=nope"}])
def test_rays_header_with_a_wrong_token_is_refused(headers):
    assert _client().get("/x", headers=headers).status_code == 401


def test_no_auth_mode_lets_requests_without_token_in():
    assert _client(no_auth=True).get("/x").status_code == 200


def test_capacity_adjustment_follows_rays_rounding():
    assert [capacity_adjusted(n, tc) for n, tc in [(4, 50), (3, 50), (1, 10), (5, 0), (0, 50), (7, None)]] == \
        [2, 2, 1, 0, 0, 7]


def _view() -> dict:
    replica = {"replica_id": "a#D#1", "state": "RUNNING", "actor_name": "SERVE_REPLICA::a#D#1", "node_id": "n1",
               "pid": 42, "start_time_s": 5.0}
    dep = {"status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED", "message": "", "target_num_replicas": 1,
           "required_resources": {"CPU": 1}, "config": {"num_replicas": 1, "max_ongoing_requests": 5},
           "ray_actor_options": {"num_cpus": 1}, "replicas": [replica]}
    return {"controller": {"node_id": "n1", "actor_id": "c1"}, "proxies": {"n1": "HEALTHY"},
            "proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000, "max_connections": 9},
            "applications": {"a": {"status": "RUNNING", "message": "", "route_prefix": "/a",
                                   "last_deployed_time_s": 1.0, "deployments": {"D": dep}}}}


def test_serve_details_in_rays_shape():
    configs = {"a": {"target_capacity": 60, "applications": [{"name": "a", "import_path": "m:app"}]}}
    out = rest_details.instance_details(_view(), configs, {"b": 3.0}, {"c": "ImportError: no"})
    assert out["controller_info"]["node_id"] == "n1" and out["target_capacity"] == 60
    assert out["http_options"] == {"host": "0.0.0.0", "port": 8000}  # Ray's fields only
    a, b, c = (out["applications"][n] for n in "abc")
    assert (a["status"], a["source"], a["deployed_app_config"]["import_path"]) == ("RUNNING", "declarative", "m:app")
    rep = a["deployments"]["D"]["replicas"][0]
    assert (rep["replica_id"], rep["state"], rep["pid"], rep["start_time_s"]) == ("a#D#1", "RUNNING", 42, 5.0)
    assert a["deployments"]["D"]["deployment_config"] == {"name": "D", "num_replicas": 1, "max_ongoing_requests": 5,
                                                          "ray_actor_options": {"num_cpus": 1}}
    assert (b["status"], c["status"]) == ("DEPLOYING", "DEPLOY_FAILED") and "ImportError: no" in c["message"]
    # a new config on its way: DEPLOYING until the controller has it, then the controller's word
    assert rest_details.instance_details(_view(), configs, {"a": 2.0}, {})["applications"]["a"]["status"] == "DEPLOYING"
    assert rest_details.instance_details(_view(), configs, {"a": 0.5}, {})["applications"]["a"]["status"] == "RUNNING"
    failed_update = rest_details.instance_details(_view(), configs, {}, {"a": "SyntaxError"})["applications"]["a"]
    assert failed_update["status"] == "DEPLOY_FAILED" and failed_update["deployments"]["D"]["status"] == "HEALTHY"
    declarative = rest_details.instance_details(_view(), configs, {}, {}, "declarative")
    assert list(declarative["applications"]) == ["a"]
    assert rest_details.instance_details(None, {}, {}, {}) == rest_details.empty()


def test_state_rows_for_rays_client_only():
    assert ray_shapes.from_ray_client({"timeout": "30"}) and not ray_shapes.from_ray_client({"limit": "5"})
    obj = {"object_id": "o", "object_size": 0, "task_status": "PENDING", "reference_type": "BORROWED",
           "pid": None, "ip": "1.2.3.4", "type": ""}
    (row,) = ray_shapes.for_ray("objects", [obj], True)
    assert (row["task_status"], row["reference_type"], row["pid"], row["type"], row["attempt_number"],
            row["call_site"]) == ("PENDING_NODE_ASSIGNMENT", "LOCAL_REFERENCE", 0, "WORKER", 0, "disabled")
    assert obj["task_status"] == "PENDING"  # raylite's own row is untouched
    workers = [{"worker_id": "w", "worker_type": "DRIVER"}, {"worker_id": "v", "worker_type": "WORKER"}]
    assert [w["worker_id"] for w in ray_shapes.for_ray("workers", workers, True)] == ["v"]
    assert len(ray_shapes.for_ray("workers", workers, False)) == 2
    (task,) = ray_shapes.for_ray("tasks", [{"task_id": "t", "state": "PENDING_X", "job_id": None,
                                            "parent_task_id": None, "type": "NORMAL_TASK"}], True)
    assert (task["state"], task["job_id"], task["parent_task_id"]) == ("PENDING_NODE_ASSIGNMENT", "", "")
