"""`from ray.runtime_env import RuntimeEnv, RuntimeEnvConfig`, as Ray's runtime_env docs write
it, was a missing module: each class is a dict, taken wherever a runtime_env dict is."""

from __future__ import annotations

import os

import pytest

import raylite as ray
from raylite.runtime_env import RuntimeEnv, RuntimeEnvConfig


def test_fields_given_are_the_dict_and_none_is_absent():
    env = RuntimeEnv(env_vars={"A": "1"}, pip=None, config={"setup_timeout_seconds": 30})
    assert env == {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 30, "eager_install": True}}
    assert isinstance(env["config"], RuntimeEnvConfig)
    assert env.env_vars() == {"A": "1"} and not env.has_working_dir()
    assert env.to_dict() == {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 30, "eager_install": True}}


def test_bad_fields_fail_where_they_are_written():
    with pytest.raises(ValueError, match="conda.*not supported by raylite"):
        RuntimeEnv(conda="myenv")
    with pytest.raises(ValueError, match="unknown runtime_env field"):
        RuntimeEnv(envvars={"A": "1"})
    with pytest.raises(ValueError, match="setup_timeout_seconds"):
        RuntimeEnvConfig(setup_timeout_seconds=0)


def test_tasks_and_actors_take_them(cluster):
    @ray.remote
    def read(name):
        return os.environ.get(name)

    @ray.remote(runtime_env=RuntimeEnv(env_vars={"QA_ACTOR_VAR": "actor"}))
    class Reader:
        def read(self, name):
            return os.environ.get(name)

    env = RuntimeEnv(env_vars={"QA_TASK_VAR": "task"}, config=RuntimeEnvConfig(setup_timeout_seconds=60))
    assert ray.get(read.options(runtime_env=env).remote("QA_TASK_VAR")) == "task"
    assert ray.get(Reader.remote().read.remote("QA_ACTOR_VAR")) == "actor"
