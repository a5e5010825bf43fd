"""What a newcomer meets first with Serve: one clear line, never a 30-line traceback.

- `serve start --http-port A` and then `serve deploy` of a config asking for other HTTP options
  (the docs' config, `host: 0.0.0.0`) says why in one line and how to go on;
- `serve.run` on an install without the serve extra names the install at once, instead of a
  proxy dying on some node with "No module named 'httptools'".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tests.serve.conftest import free_port

APP = textwrap.dedent("""
    from raylite import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hello:
        def __init__(self, greeting: str = "hello") -> None:
            self.greeting = greeting

        def __call__(self, request) -> str:
            return self.greeting

    def builder(args: dict):
        return Hello.bind(args.get("greeting", "hello"))
""")


@pytest.fixture()
def short_tmp():
    path = tempfile.mkdtemp(prefix="rl-serve-", dir="/tmp")  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(temp: str, **extra: str) -> dict:
    env = {**os.environ, "RAYLITE_TEMP_DIR": os.path.join(temp, "sessions"), **extra}
    for var in ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN"):
        env.pop(var, None)
    return env


def _run(args: list[str], env: dict, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=240)


def test_serve_deploy_with_other_http_options_is_one_error_line(short_tmp):
    env = _env(short_tmp)
    with open(os.path.join(short_tmp, "hello.py"), "w") as f:
        f.write(APP)
    with open(os.path.join(short_tmp, "serve_config.yaml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            http_options: {{host: 0.0.0.0, port: {free_port()}}}
            applications:
            - name: hello
              route_prefix: /hello
              import_path: hello:builder
              args: {{greeting: hi}}
            """))
    started = _run(["raylite.cli", "start", "--head", f"--port={free_port()}", "--num-cpus=2",
                    f"--dashboard-port={free_port()}"], env, short_tmp)
    assert started.returncode == 0, started.stderr
    try:
        serve_start = _run(["raylite.serve.scripts", "start", "--http-port", str(free_port())],
                           env, short_tmp)
        assert serve_start.returncode == 0, serve_start.stderr
        deploy = _run(["raylite.serve.scripts", "deploy", "serve_config.yaml"], env, short_tmp)
        assert deploy.returncode == 1
        lines = [line for line in deploy.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, deploy.stderr
        assert lines[0].startswith("Error: Serve is already running with HTTP on 127.0.0.1:")
        assert "serve shutdown -y" in lines[0]
    finally:
        _run(["raylite.cli", "stop"], env, short_tmp)


def test_serve_run_without_the_serve_extra_names_the_install(short_tmp):
    hidden = os.path.join(short_tmp, "hide", "httptools")
    os.makedirs(hidden)
    with open(os.path.join(hidden, "__init__.py"), "w") as f:  # as if it was never installed
        f.write("raise ImportError('No module named httptools')\n")
    path = os.pathsep.join(p for p in (os.path.dirname(hidden), os.environ.get("PYTHONPATH")) if p)
    code = APP + textwrap.dedent("""
        import raylite
        raylite.init(num_cpus=1, include_dashboard=False)
        try:
            serve.run(builder({}))
        except ImportError as e:
            print("ERROR", e)
        """)
    r = subprocess.run([sys.executable, "-c", code], env=_env(short_tmp, PYTHONPATH=path),
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERROR ") and "pip install 'raylite[serve]'" in r.stdout
    assert len(r.stdout.strip().splitlines()) == 1
    assert "died" not in r.stdout + r.stderr
