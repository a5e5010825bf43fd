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
