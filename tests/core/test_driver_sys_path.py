"""Modules beside the driver's script import in its tasks and actors, as in Ray (issue 29 §1).

A program split into `main.py` and `helper_mod.py` in one folder, run from another folder
(`python /path/to/main.py`): its tasks and actors import `helper_mod` on a local cluster the
driver starts and on a cluster `raylite start --head` left running (`init(address="auto")`);
modules in the driver's working directory import too. Two programs whose `helper_mod` differ,
joined to one cluster, each get their own. Real script files, run as subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tests.api_fixtures import free_port

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MAIN = textwrap.dedent("""
    import json, sys
    import raylite
    import helper_mod

    raylite.init(address=sys.argv[1] if len(sys.argv) > 1 else None, num_cpus=None if len(sys.argv) > 1 else 1,
                 logging_level="WARNING")

    @raylite.remote
    def double(x):
        return helper_mod.double(x)

    @raylite.remote
    def from_cwd():
        import cwd_mod  # beside neither the script nor raylite: in the directory it was run from
        return cwd_mod.NAME

    @raylite.remote
    def nested(x):
        return raylite.get(double.remote(x))

    @raylite.remote
    class Doubler:
        def run(self, x):
            return helper_mod.double(x)

    out = {"task": raylite.get(double.remote(21), timeout=120),
           "nested": raylite.get(nested.remote(21), timeout=120),
           "actor": raylite.get(Doubler.remote().run.remote(21), timeout=120),
           "cwd": raylite.get(from_cwd.remote(), timeout=120),
           "runtime_env": raylite.get_runtime_context().runtime_env}
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture
def program(tmp_path):
    """(script, cwd): main.py beside helper_mod.py, and another directory to run it from."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text(MAIN)
    (app / "helper_mod.py").write_text("def double(x):\n    return 2 * x\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cwd_mod.py").write_text("NAME = 'from the working directory'\n")
    return app / "main.py", elsewhere


@pytest.fixture
def short_tmp():
    path = tempfile.mkdtemp(prefix="rl-syspath-", dir="/tmp")  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(temp: str) -> dict:
    env = {**os.environ, "RAYLITE_TEMP_DIR": os.path.join(temp, "sessions"), "PYTHONPATH": ROOT}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN"):
        env.pop(var, None)
    return env


def _run_program(script, cwd, env, *args) -> dict:
    done = subprocess.run([sys.executable, str(script), *args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout[-2000:], done.stderr[-4000:])
    return json.loads(lines[-1][len("RESULT "):])


def _cli(args: list[str], env: dict, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raylite.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=240)


EXPECTED = {"task": 42, "nested": 42, "actor": 42, "cwd": "from the working directory", "runtime_env": {}}


def test_a_local_clusters_workers_import_modules_beside_the_script(program, short_tmp):
    script, elsewhere = program
    assert _run_program(script, elsewhere, _env(short_tmp)) == EXPECTED


@pytest.fixture
def running_cluster(short_tmp):
    env = _env(short_tmp)
    started = _cli(["start", "--head", f"--port={free_port()}", "--num-cpus=2", "--include-dashboard=false"],
                   env, short_tmp)
    assert started.returncode == 0, started.stderr
    yield env
    _cli(["stop"], env, short_tmp)


def test_a_joined_clusters_workers_import_modules_beside_the_script(program, running_cluster):
    """The cluster was started from another directory: the driver's directories reach its
    workers through the job, and the runtime context still shows the user's runtime_env only."""
    script, elsewhere = program
    assert _run_program(script, elsewhere, running_cluster, "auto") == EXPECTED


def test_two_programs_with_same_named_modules_each_import_their_own(program, running_cluster, tmp_path):
    script, elsewhere = program
    other = tmp_path / "other_app"
    other.mkdir()
    (other / "main.py").write_text(MAIN)
    (other / "helper_mod.py").write_text("def double(x):\n    return 'other ' + str(x)\n")
    first = _run_program(script, elsewhere, running_cluster, "auto")
    second = _run_program(other / "main.py", elsewhere, running_cluster, "auto")
    assert (first["task"], first["actor"]) == (42, 42)
    assert (second["task"], second["actor"]) == ("other 21", "other 21")


def test_driver_sys_path_is_the_script_dir_and_the_working_dir(tmp_path, monkeypatch):
    from raylite._core.cluster.launch import driver_sys_path

    script = tmp_path / "app" / "main.py"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setattr(sys, "path", [str(script.parent), *sys.path])
    assert driver_sys_path() == [str(script.parent), str(tmp_path)]
    assert driver_sys_path(has_working_dir=True) == [str(script.parent)]  # the working_dir is shipped
    monkeypatch.setattr(sys, "path", sys.path[1:])  # `python -m pkg.main`: the script's dir is not on sys.path
    assert driver_sys_path() == [str(tmp_path)]
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert driver_sys_path() == [str(tmp_path)]
