"""runtime_env pip layered over the Python that runs raylite, whatever kind it is (issue 29 §1).

Each test makes a user's environment of one kind (a system Python with a user site, a
`python -m venv`, a `virtualenv`, a `uv venv`), installs packages into it that no other
environment has (`rl_layer_user` 1.0, `rl_layer_mine`), starts a cluster with that environment's python and
asks for a job environment holding `rl_layer_job` and `rl_layer_user` 2.0, real wheels built
here with `pip wheel` from source folders (no network). In a task and in a submitted job's
driver: raylite and its dependencies import, the user's own package is seen where the job did
not ask for it, and the job's version wins where both have it.

The user's environments reach raylite's dependencies the way the job's environment reaches
the user's: through a .pth naming the test interpreter's site directories (so no test installs
from the network); raylite itself comes from this checkout through PYTHONPATH, as spawned
nodes and workers get it.
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

from raylite._core.runtime_env import pip_env
from tests.api_fixtures import free_port

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_wheel(tmp, name: str, version: str, value: str) -> str:
    """A real wheel from a setuptools project, built by `pip wheel` without network."""
    src = tmp / f"src-{name}-{version}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"VALUE = {value!r}\n")
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "{version}"
        [tool.setuptools]
        packages = ["{name}"]
    """))
    out = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(out), str(src)], check=True, timeout=120,
                   capture_output=True)
    (wheel,) = [p for p in out.iterdir() if p.name.startswith(f"{name}-{version}-")]
    return str(wheel)


@pytest.fixture(scope="module")
def raylite_wheel(tmp_path_factory) -> str:
    """raylite itself as a wheel, built from this checkout (installed as users install it)."""
    out = tmp_path_factory.mktemp("raylite-wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(out), ROOT], check=True, timeout=240, capture_output=True)
    (wheel,) = out.glob("raylite-*.whl")
    return str(wheel)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    if shutil.which("pip") is None and subprocess.run([sys.executable, "-m", "pip", "--version"],
                                                       capture_output=True).returncode != 0:
        pytest.skip("pip is needed to build the test wheels")
    tmp = tmp_path_factory.mktemp("layer-wheels")
    return {"user1": build_wheel(tmp, "rl_layer_user", "1.0", "user 1.0"),
            "user2": build_wheel(tmp, "rl_layer_user", "2.0", "job 2.0"),
            "job": build_wheel(tmp, "rl_layer_job", "1.0", "job only"),
            "mine": build_wheel(tmp, "rl_layer_mine", "1.0", "user only")}


def _give_raylites_deps(python: str) -> None:
    """The environment sees the test interpreter's packages (raylite's dependencies) after
    its own, as if the user had installed them there."""
    site_dir = subprocess.run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(site_dir, exist_ok=True)
    with open(os.path.join(site_dir, "zz_test_interpreter.pth"), "w") as f:
        f.write("\n".join(pip_env.base_site_dirs()) + "\n")


def _pip_install(python: str, wheel: str, env: dict | None = None, user: bool = False) -> None:
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--disable-pip-version-check"]
    subprocess.run([*cmd, *(["--user"] if user else []), wheel], check=True, timeout=120, capture_output=True,
                   env=env)


def make_env(kind: str, tmp, wheels, request) -> tuple[str, dict]:
    """(python, extra environment variables) of a user's environment of `kind`, holding
    rl_layer_user 1.0 and rl_layer_mine; raylite comes from this checkout through PYTHONPATH,
    except in "venv-installed", where it is installed into the venv from a wheel."""
    env_dir = str(tmp / f"user-{kind}")
    extra: dict[str, str] = {}
    if kind == "system":
        python = getattr(sys, "_base_executable", sys.executable) if sys.prefix != sys.base_prefix else sys.executable
        probe = subprocess.run([python, "-c", "import msgpack, cloudpickle, psutil, numpy, uvloop, starlette, "
                                "uvicorn, httpx, yaml, pip"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"the system Python {python} lacks raylite's dependencies (they are installed in "
                        "the virtualenv running the tests)")
        extra["PYTHONUSERBASE"] = env_dir  # the user's package goes to a user site of its own
        for wheel in (wheels["user1"], wheels["mine"]):
            _pip_install(python, wheel, env={**os.environ, **extra}, user=True)
        extra["PYTHONPATH"] = ROOT
        return python, extra
    if kind in ("venv", "venv-installed"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True, timeout=120)
    elif kind == "virtualenv":
        if shutil.which("virtualenv") is None:
            pytest.skip("virtualenv is not installed (pip install virtualenv)")
        subprocess.run(["virtualenv", "-q", "--no-pip", "--no-setuptools", "--no-wheel", "-p", sys.executable,
                        env_dir], check=True, timeout=120, capture_output=True)
    elif kind == "uv":
        if shutil.which("uv") is None:
            pytest.skip("uv is not installed (pip install uv)")
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, env_dir], check=True, timeout=120,
                       capture_output=True)
    python = os.path.join(env_dir, "bin", "python")
    _give_raylites_deps(python)
    for wheel in (wheels["user1"], wheels["mine"]):
        _pip_install(python, wheel)
    if kind == "venv-installed":
        _pip_install(python, request.getfixturevalue("raylite_wheel"))
    else:
        extra["PYTHONPATH"] = ROOT
    return python, extra


DRIVER = r"""
import json, os, sys
import raylite
import rl_layer_user

pip = json.loads(sys.argv[1])
raylite.init(num_cpus=1, dashboard_port=int(sys.argv[2]), logging_level="WARNING")

@raylite.remote(runtime_env={"pip": pip})
def in_job_env():
    import msgpack, rl_layer_job, rl_layer_mine, rl_layer_user
    return rl_layer_user.VALUE, rl_layer_job.VALUE, rl_layer_mine.VALUE

@raylite.remote
def plain():
    import rl_layer_user
    return rl_layer_user.VALUE

out = {"raylite": raylite.__file__, "driver": rl_layer_user.VALUE, "plain": raylite.get(plain.remote(), timeout=120),
       "pip_task": raylite.get(in_job_env.remote(), timeout=240)}

from raylite.job_submission import JobSubmissionClient
client = JobSubmissionClient()
sid = client.submit_job(entrypoint="python " + sys.argv[3], runtime_env={"pip": pip})
import time
deadline = time.monotonic() + 240
while str(client.get_job_status(sid)).split(".")[-1] not in ("SUCCEEDED", "FAILED", "STOPPED"):
    assert time.monotonic() < deadline, "the job did not end"
    time.sleep(0.2)
out["job_status"] = str(client.get_job_status(sid)).split(".")[-1]
out["job_logs"] = client.get_job_logs(sid)
print("RESULT " + json.dumps(out))
"""

JOB_DRIVER = r"""
import sys, raylite, rl_layer_job, rl_layer_mine, rl_layer_user
raylite.init()

@raylite.remote
def task():
    import rl_layer_job, rl_layer_mine, rl_layer_user
    return rl_layer_user.VALUE, rl_layer_job.VALUE, rl_layer_mine.VALUE

print("job driver python", sys.prefix)
print("job driver sees", rl_layer_user.VALUE, "/", rl_layer_job.VALUE, "/", rl_layer_mine.VALUE)
print("job task sees", " / ".join(raylite.get(task.remote(), timeout=120)))
"""


@pytest.fixture
def short_temp_dir():
    """The cluster's temp dir: short, as unix socket paths must be."""
    path = tempfile.mkdtemp(prefix="rl-layer-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("kind", ["venv", "venv-installed", "virtualenv", "uv", "system"])
def test_pip_env_is_layered_over_the_users_python(kind, tmp_path, wheels, short_temp_dir, request):
    python, extra = make_env(kind, tmp_path, wheels, request)
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "job_driver.py").write_text(JOB_DRIVER)
    pip = {"packages": [wheels["job"], wheels["user2"]], "pip_install_options": ["--no-index"]}
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "RAYLITE_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env.update(extra, RAYLITE_TEMP_DIR=short_temp_dir)
    done = subprocess.run([python, str(tmp_path / "driver.py"), json.dumps(pip), str(free_port()),
                           str(tmp_path / "job_driver.py")], capture_output=True, text=True, timeout=280,
                          env=env, cwd=str(tmp_path))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout[-3000:], done.stderr[-5000:])
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["raylite"].startswith(ROOT if "PYTHONPATH" in extra else str(tmp_path)), out["raylite"]
    assert out["driver"] == out["plain"] == "user 1.0"  # the user's package, in the driver and a task
    # the job's version wins, its own package is there, and so is the user's own
    assert out["pip_task"] == ["job 2.0", "job only", "user only"]
    assert out["job_status"] == "SUCCEEDED", out["job_logs"][-3000:]
    assert "job driver sees job 2.0 / job only / user only" in out["job_logs"], out["job_logs"][-3000:]
    assert "job task sees job 2.0 / job only / user only" in out["job_logs"], out["job_logs"][-3000:]
    (venv,) = [line.split()[-1] for line in out["job_logs"].splitlines() if line.startswith("job driver python")]
    assert venv.startswith(os.path.join(short_temp_dir, "runtime_resources", "pip"))  # the job's own python


def test_environments_of_two_interpreters_are_not_shared(monkeypatch):
    """A job environment layers over one interpreter's site dirs: another virtualenv on the
    same machine with the same requirements gets its own."""
    spec = ["some-package==1.0"]
    key = pip_env.env_key("pip", spec)
    monkeypatch.setattr(pip_env, "base_site_dirs", lambda: ["/some/other/venv/lib/python3/site-packages"])
    assert pip_env.env_key("pip", spec) != key


def test_the_layer_pth_puts_the_jobs_packages_first(tmp_path, wheels):
    """The environment alone (no cluster): its own site-packages come before the running
    interpreter's, whose packages (raylite's dependencies) stay importable."""
    pip = {"packages": [wheels["user2"]], "pip_install_options": ["--no-index"]}
    venv = pip_env.ensure(str(tmp_path), "pip", pip)
    python = os.path.join(pip_env.bin_dir(venv), "python")
    code = "import sys, msgpack, rl_layer_user; print(rl_layer_user.VALUE); print(json.dumps(sys.path))"
    done = subprocess.run([python, "-c", "import json; " + code], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr
    value, path = done.stdout.splitlines()
    assert value == "job 2.0"
    path = json.loads(path)
    own = pip_env.site_packages(venv)
    assert all(path.index(own) < path.index(d) for d in pip_env.base_site_dirs())


def test_runtime_env_uv_installs_with_uv_and_layers_the_same_way(tmp_path, wheels):
    if shutil.which("uv") is None:
        pytest.skip("uv is not installed (pip install uv)")
    spec = {"packages": [wheels["user2"]], "uv_pip_install_options": ["--no-index"]}
    venv = pip_env.ensure(str(tmp_path), "uv", spec)
    assert venv is not None and venv != pip_env.ensure(str(tmp_path), "pip", spec)  # one env per tool
    python = os.path.join(pip_env.bin_dir(venv), "python")
    done = subprocess.run([python, "-c", "import msgpack, rl_layer_user; print(rl_layer_user.VALUE)"],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0 and done.stdout.strip() == "job 2.0", done.stderr
    installer = subprocess.run([python, "-c", "import importlib.metadata as m; "
                                "print(m.distribution('rl_layer_user').read_text('INSTALLER'))"],
                               capture_output=True, text=True, timeout=60)
    assert installer.stdout.strip() == "uv", installer.stdout  # uv installed it, not pip
