"""RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1 (Ray's opt-in): a task or actor that asks for no GPU
sees CUDA_VISIBLE_DEVICES="" (no device); without it the variable is left unset."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from raylite._core.config import Config

SCRIPT = textwrap.dedent("""
    import os
    import raylite as ray

    ray.init(num_cpus=1)

    @ray.remote(num_gpus=0)
    def visible():
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    @ray.remote(num_gpus=0)
    class Probe:
        def visible(self):
            return os.environ.get("CUDA_VISIBLE_DEVICES")

    print("seen", repr(ray.get(visible.remote())), repr(ray.get(Probe.remote().visible.remote())))
    ray.shutdown()
""")


def test_the_setting_is_read_from_rays_variable():
    assert Config.from_env({"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}).accel_env_var_override_on_zero
    assert not Config.from_env({}).accel_env_var_override_on_zero


@pytest.mark.parametrize("override, expected", [(None, "seen None None"), ("1", "seen '' ''")])
def test_zero_gpu_work_sees_no_device_only_when_asked(override, expected):
    temp_dir = tempfile.mkdtemp(prefix="rlaccel", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["RAYLITE_TEMP_DIR"] = temp_dir
    env.pop("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", None)
    if override:
        env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = override
    try:
        out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert expected in out.stdout
