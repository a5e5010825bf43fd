"""ray.job_config.JobConfig given to init(): its namespace and runtime_env apply to the job, and
its code_search_path directories are importable in the job's workers, as in Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from raylite.job_config import JobConfig


def test_job_config_keeps_rays_fields_and_checks_them():
    jc = JobConfig(code_search_path=["/x"], metadata={"team": "a"}, ray_namespace="ns",
                   runtime_env={"env_vars": {"A": "1"}})
    jc.set_metadata("k", "v")
    assert (jc.code_search_path, jc.metadata, jc.ray_namespace) == (["/x"], {"team": "a", "k": "v"}, "ns")
    assert jc.runtime_env == {"env_vars": {"A": "1"}} and jc.default_actor_lifetime == "non_detached"
    with pytest.raises(ValueError, match="Default actor lifetime"):
        jc.set_default_actor_lifetime("forever")


def test_init_applies_namespace_runtime_env_and_code_search_path(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "searched_module.py").write_text("def where():\n    return 'searched'\n")
    script = textwrap.dedent(f"""
        import os
        import raylite as ray
        from raylite.job_config import JobConfig

        ray.init(num_cpus=1, job_config=JobConfig(code_search_path=[{str(code)!r}], ray_namespace="jobns",
                                                  runtime_env={{"env_vars": {{"FROM_JOB_CONFIG": "yes"}}}}))

        @ray.remote
        def probe():
            import searched_module
            return searched_module.where(), os.environ.get("FROM_JOB_CONFIG"), ray.get_runtime_context().namespace

        print("probe", ray.get(probe.remote()))
        ray.shutdown()
    """)
    temp_dir = tempfile.mkdtemp(prefix="rljc", dir="/tmp")
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp_dir}
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                             env=env, cwd=str(tmp_path))
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "probe ('searched', 'yes', 'jobns')" in out.stdout


def test_default_actor_lifetime_detached_keeps_an_actors_children_after_it_dies(tmp_path):
    # Ray's test_default_actor_lifetime: the job's default reaches actors created inside other
    # actors; an explicit lifetime= still wins. Also: a task an actor starts runs in the actor's
    # runtime_env (its env_vars), as in Ray.
    script = textwrap.dedent("""
        import os, signal, time
        import raylite as ray
        from raylite.job_config import JobConfig

        @ray.remote
        class Child:
            def ready(self):
                return "ok"

        @ray.remote
        def env_of_task():
            return os.environ.get("ACTOR_VAR")

        @ray.remote
        class Owner:
            def make(self, lifetime):
                self.child = Child.options(lifetime=lifetime).remote() if lifetime else Child.remote()
                assert ray.get(self.child.ready.remote()) == "ok"
                return self.child
            def pid(self):
                return os.getpid()
            def task_env(self):
                return ray.get(env_of_task.remote())

        def child_alive_after_owner_dies(lifetime):
            owner = Owner.remote()
            child = ray.get(owner.make.remote(lifetime))
            os.kill(ray.get(owner.pid.remote()), signal.SIGKILL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    ray.get(child.ready.remote(), timeout=10)
                except ray.exceptions.RayActorError:
                    return False
                time.sleep(0.2)
            return True

        ray.init(num_cpus=2, job_config=JobConfig(default_actor_lifetime="detached"))
        print("default", child_alive_after_owner_dies(None))
        print("explicit", child_alive_after_owner_dies("non_detached"))
        print("env", ray.get(Owner.options(runtime_env={"env_vars": {"ACTOR_VAR": "x"}}).remote().task_env.remote()))
        print("visible", ray.get_runtime_context().runtime_env)
        ray.shutdown()
    """)
    temp_dir = tempfile.mkdtemp(prefix="rljc", dir="/tmp")
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp_dir}
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                             env=env, cwd=str(tmp_path))
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "default True" in lines and "explicit False" in lines and "env x" in lines
    assert "visible {}" in lines  # raylite's own field stays out of the user's view
