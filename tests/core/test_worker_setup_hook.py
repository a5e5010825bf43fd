"""runtime_env={"worker_process_setup_hook": ...}: code run in each worker before its first task,
given as a callable or as a "module.function" path; and the actor's built-in `__ray_ready__`."""

from __future__ import annotations

import os
import textwrap

import pytest

import raylite as ray
from raylite.exceptions import RuntimeEnvSetupError


def _mark_worker():
    os.environ["SETUP_HOOK_RAN"] = str(int(os.environ.get("SETUP_HOOK_RAN", "0")) + 1)


@ray.remote
def hook_runs():
    return os.environ.get("SETUP_HOOK_RAN")


@ray.remote
class Probe:
    def hook_runs(self):
        return os.environ.get("SETUP_HOOK_RAN")


def test_callable_hook_runs_once_before_tasks(cluster):
    env = {"worker_process_setup_hook": _mark_worker, "env_vars": {"HOOK_TEST": "callable"}}
    results = ray.get([hook_runs.options(runtime_env=env).remote() for _ in range(6)], timeout=60)
    assert results == ["1"] * 6  # once per worker, however many tasks it ran


def test_callable_hook_runs_in_an_actor_before_init(cluster):
    probe = Probe.options(runtime_env={"worker_process_setup_hook": _mark_worker}).remote()
    assert ray.get(probe.__ray_ready__.remote(), timeout=60) is True
    assert ray.get(probe.hook_runs.remote(), timeout=60) == "1"


def test_string_hook_is_imported_in_the_worker(cluster, tmp_path):
    (tmp_path / "hookmod_for_test.py").write_text(textwrap.dedent("""
        import os

        def setup():
            os.environ["SETUP_HOOK_RAN"] = "from-string"
    """))
    env = {"py_modules": [str(tmp_path / "hookmod_for_test.py")],
           "worker_process_setup_hook": "hookmod_for_test.setup"}
    assert ray.get(hook_runs.options(runtime_env=env).remote(), timeout=60) == "from-string"


def _broken_hook():
    raise RuntimeError("cannot configure logging")


def test_failing_hook_fails_the_task_with_the_reason(cluster):
    ref = hook_runs.options(runtime_env={"worker_process_setup_hook": _broken_hook,
                                         "env_vars": {"HOOK_TEST": "broken"}}).remote()
    with pytest.raises(RuntimeEnvSetupError, match="cannot configure logging"):
        ray.get(ref, timeout=60)


def test_bad_hook_values_are_refused_at_submit(cluster):
    with pytest.raises(ValueError, match="module.function"):
        hook_runs.options(runtime_env={"worker_process_setup_hook": "nodots"}).remote()
    with pytest.raises(TypeError, match="callable"):
        hook_runs.options(runtime_env={"worker_process_setup_hook": 42}).remote()


def test_ray_terminate_ends_the_actor_after_queued_calls(cluster):
    from raylite.exceptions import RayActorError

    probe = Probe.remote()
    first = probe.hook_runs.remote()
    probe.__ray_terminate__.remote()
    assert ray.get(first, timeout=60) is None  # queued before the terminate: still answered
    with pytest.raises(RayActorError):
        ray.get(probe.hook_runs.remote(), timeout=60)


def test_a_hook_function_given_to_init_reaches_the_first_actor(tmp_path):
    """Ray's documentation example: `ray.init(runtime_env={"worker_process_setup_hook": fn})`
    with no working_dir, then an actor. The function must be shipped once the cluster exists
    (it failed with "can not serialize 'function' object")."""
    import subprocess
    import sys

    script = tmp_path / "hook_driver.py"
    script.write_text(textwrap.dedent("""
        import os
        import raylite as ray

        def setup():
            os.environ["FROM_INIT_HOOK"] = "yes"

        ray.init(num_cpus=1, runtime_env={"worker_process_setup_hook": setup})

        @ray.remote
        class Probe:
            def value(self):
                return os.environ.get("FROM_INIT_HOOK")

        print("actor saw", ray.get(Probe.remote().value.remote()))
        ray.shutdown()
    """))
    import shutil
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="rlhook", dir="/tmp")  # short: unix socket paths
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp_dir}
    try:
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "actor saw yes" in out.stdout
