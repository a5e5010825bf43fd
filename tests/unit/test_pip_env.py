"""runtime_env pip: spec forms, the cache key, one build under concurrent requests (no pip run)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from raylite._core.runtime_env import pip_env


def test_spec_forms_and_errors(tmp_path):
    assert pip_env.requirements(["a==1", " b "]) == (["a==1", "b"], [])
    assert pip_env.requirements({"packages": ["a"], "pip_install_options": ["--no-index"]}) == (["a"], ["--no-index"])
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("# pinned\nfoo==2\n\nbar\n")
    assert pip_env.requirements(str(reqs)) == (["foo==2", "bar"], [])
    with pytest.raises(ValueError, match="unknown field"):
        pip_env.requirements({"pakages": ["a"]})
    with pytest.raises(ValueError, match="list of requirement strings"):
        pip_env.requirements([1])
    assert pip_env.wanted({"env_vars": {}}) is None and pip_env.wanted({"uv": ["x"]}) == ("uv", ["x"])


def test_key_follows_the_requirements_and_options():
    base = pip_env.env_key("pip", ["a"])
    assert base == pip_env.env_key("pip", {"packages": ["a"]})
    assert len({base, pip_env.env_key("pip", ["b"]), pip_env.env_key("pip", {"packages": ["a"],
                "pip_install_options": ["--pre"]}), pip_env.env_key("uv", ["a"])}) == 4


def test_installed_requirements_need_no_environment(tmp_path):
    assert pip_env.satisfied_by_base(["msgpack", "numpy>=1.0"])
    assert not pip_env.satisfied_by_base(["numpy<1.0"]) and not pip_env.satisfied_by_base(["not-a-pkg-xyz"])
    assert not pip_env.satisfied_by_base(["/tmp/x.whl"])
    assert pip_env.ensure(str(tmp_path), "pip", ["msgpack"]) is None
    assert not os.path.exists(tmp_path / "runtime_resources")


def test_concurrent_requests_build_the_environment_once(tmp_path, monkeypatch):
    builds = []

    def fake_build(venv, tool, reqs, options, timeout_s):
        builds.append(venv)
        time.sleep(0.3)  # long enough for the other caller to arrive and wait on the lock
        os.makedirs(venv)
        open(os.path.join(venv, pip_env.READY), "w").close()

    monkeypatch.setattr(pip_env, "_build", fake_build)
    results = []
    threads = [threading.Thread(target=lambda: results.append(pip_env.ensure(str(tmp_path), "pip", ["x-missing"])))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(builds) == 1 and len(set(results)) == 1 and results[0] == builds[0]
    assert results[0].startswith(str(tmp_path / "runtime_resources" / "pip"))
