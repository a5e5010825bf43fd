"""The `serve` command line end to end: real processes, real HTTP (httpx), Ctrl-C, a running cluster.

Each test starts its own cluster in a private session directory (RAYLITE_TEMP_DIR), so nothing
here joins, or is joined by, a cluster that something else started on this machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import raylite.serve as serve_pkg
from tests.api_fixtures import free_port  # noqa: F401 - one helper, re-exported

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(not hasattr(serve_pkg, "run"),
                                reason="the Serve runtime (branch serve) is not merged here")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

APP = textwrap.dedent('''
    from pydantic import BaseModel

    from raylite import serve


    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hello:
        def __init__(self, greeting: str = "hello"):
            self.greeting = greeting

        async def __call__(self, request):
            print(f"replica answering {request.url.path}", flush=True)
            return {"msg": self.greeting}


    app = Hello.bind()


    class Args(BaseModel):
        greeting: str = "hi"


    def builder(args: Args):
        return Hello.bind(args.greeting)


    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Broken:
        def __init__(self):
            raise ValueError("the model file is missing")


    broken = Broken.bind()


    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Reader:
        async def __call__(self, request):
            import os

            with open("data/msg.txt") as f:  # relative: needs the working_dir
                return {"file": f.read().strip(), "mode": os.environ.get("MODE")}


    reader = Reader.bind()
''')




def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def get_json(url: str):
    try:
        r = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


@pytest.fixture
def app_dir(tmp_path):
    (tmp_path / "hello_cli.py").write_text(APP)
    (tmp_path / "serve_config.py").write_text("from hello_cli import app  # noqa: F401\n")
    return tmp_path


@pytest.fixture
def env():
    sessions = tempfile.mkdtemp(prefix="rls-", dir="/tmp")  # private and short (unix socket paths)
    e = dict(os.environ)
    e["RAYLITE_TEMP_DIR"] = sessions
    e.pop("RAYLITE_ADDRESS", None)
    e.pop("RAY_ADDRESS", None)
    e["PYTHONPATH"] = REPO
    yield e
    shutil.rmtree(sessions, ignore_errors=True)


def serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "raylite.serve.scripts", *args]


def cli(args, env, cwd, timeout=180, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(serve_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"serve {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _ctrl_c_reaches_it() -> None:
    """In the child before exec: SIGINT as a terminal's Ctrl-C would find it. A test run started
    in the background of a non-interactive shell (`... &`) inherits SIGINT ignored, and a Python
    started so keeps ignoring it: the tests' "Ctrl-C" would then never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def serve_run(args, env, cwd, log_path):
    with open(log_path, "w") as log:
        proc = subprocess.Popen(serve_cmd("run", *args), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_ctrl_c_reaches_it)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def processes_using(path: str) -> list[int]:
    """Pids whose command line or environment mentions `path` (the private session dir, or the
    RAYLITE_TEMP_DIR every process of the cluster inherits: workers retitle themselves ray::...)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    mentions = path.encode() in f.read()
                if not mentions:
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        mentions = path.encode() in f.read()
            except OSError:
                continue
            if mentions and int(entry) != os.getpid():
                found.append(int(entry))
    return found


def interrupt_and_wait(proc, port: int, log_path, sessions: str, sig: int = signal.SIGINT) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"serve run did not exit after Ctrl-C:\n{open(log_path).read()}") from None
    assert proc.returncode == 0, open(log_path).read()
    wait_until(lambda: port_is_free(port), 30, f"port {port} to be free")
    wait_until(lambda: not processes_using(sessions), 30, "the local cluster's processes to exit")


def test_serve_run_import_path_answers_http_streams_logs_and_ctrl_c_tears_down(app_dir, env, tmp_path):
    port = free_port()
    log = tmp_path / "run.log"
    with serve_run(["hello_cli:app", "--port", str(port)], env, app_dir, log) as proc:
        body = wait_until(lambda: get_json(f"http://127.0.0.1:{port}/") or proc.poll() is not None, 120,
                          "the app to answer")
        assert body == {"msg": "hello"}, open(log).read()
        wait_until(lambda: "replica answering /" in open(log).read(), 30, "the replica's log line")
        assert processes_using(env["RAYLITE_TEMP_DIR"])
        interrupt_and_wait(proc, port, log, env["RAYLITE_TEMP_DIR"])
    assert get_json(f"http://127.0.0.1:{port}/") is None


@pytest.mark.slow
def test_serve_run_builder_args_config_file_and_seed_form(app_dir, env, tmp_path):
    port = free_port()
    log = tmp_path / "run.log"
    with serve_run(["hello_cli:builder", "greeting=bonjour", "--port", str(port), "--route-prefix", "/greet"],
                   env, app_dir, log) as proc:
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/greet"), 120, "builder app") == {
            "msg": "bonjour"}
        interrupt_and_wait(proc, port, log, env["RAYLITE_TEMP_DIR"])

    config = app_dir / "serve.yaml"
    config.write_text(textwrap.dedent(f"""
        http_options: {{host: 127.0.0.1, port: {port}}}
        applications:
        - name: a
          route_prefix: /a
          import_path: hello_cli:builder
          args: {{greeting: from-config}}
        - name: b
          route_prefix: /b
          import_path: serve_config:app
    """))
    with serve_run([str(config)], env, app_dir, log) as proc:
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/a"), 120, "app a") == {"msg": "from-config"}
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/b"), 30, "app b") == {"msg": "hello"}
        interrupt_and_wait(proc, port, log, env["RAYLITE_TEMP_DIR"], signal.SIGTERM)  # as `kill` or systemd do

    (app_dir / "data").mkdir()
    (app_dir / "data" / "msg.txt").write_text("from the working dir\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with serve_run(["hello_cli:reader", "--port", str(port), "--working-dir", str(app_dir),
                    "--runtime-env-json", '{"env_vars": {"MODE": "prod"}}'], env, elsewhere, log) as proc:
        # run from elsewhere (--app-dir defaults to "."): the import fails, naming the module
        proc.wait(120)
    assert proc.returncode == 1 and "no module named 'hello_cli'" in open(log).read()
    with serve_run(["hello_cli:reader", "--app-dir", str(app_dir), "--port", str(port), "--working-dir",
                    str(app_dir), "--runtime-env-json", '{"env_vars": {"MODE": "prod"}}'], env, elsewhere,
                   log) as proc:
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/"), 120, "the reader app") == {
            "file": "from the working dir", "mode": "prod"}
        interrupt_and_wait(proc, port, log, env["RAYLITE_TEMP_DIR"])


@pytest.mark.slow
def test_deploy_status_config_redeploy_and_shutdown_on_a_running_cluster(app_dir, env, tmp_path):
    import yaml

    head_port, port = free_port(), free_port()
    subprocess.run([sys.executable, "-m", "raylite.cli", "start", "--head", "--port", str(head_port),
                    "--num-cpus", "2"], env=env, check=True, capture_output=True, timeout=120)
    try:
        config = app_dir / "serve.yaml"

        (app_dir / "data").mkdir()
        (app_dir / "data" / "msg.txt").write_text("shipped\n")

        def write(greeting: str, with_reader: bool = True) -> None:
            reader = textwrap.dedent(f"""
                - name: reader
                  route_prefix: /reader
                  import_path: hello_cli:reader
                  runtime_env: {{working_dir: {app_dir}, env_vars: {{MODE: cfg}}}}
            """).lstrip("\n") if with_reader else ""
            config.write_text(textwrap.dedent(f"""
                http_options: {{host: 127.0.0.1, port: {port}}}
                applications:
                - name: greeter
                  route_prefix: /
                  import_path: hello_cli:builder
                  args: {{greeting: {greeting}}}
                  deployments:
                  - name: Hello
                    num_replicas: 2
            """) + reader)

        write("one")
        cli(["deploy", str(config)], env, app_dir)
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/"), 120, "deployed app") == {"msg": "one"}
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/reader"), 60, "the reader app") == {
            "file": "shipped", "mode": "cfg"}  # the app's runtime_env reached its replicas

        def running():
            status = yaml.safe_load(cli(["status"], env, app_dir).stdout)
            app = status["applications"].get("greeter") or {}
            return app.get("status") == "RUNNING" and status
        status = wait_until(running, 60, "status RUNNING")
        assert status["applications"]["greeter"]["deployments"]["Hello"]["replica_states"] == {"RUNNING": 2}

        shown = list(yaml.safe_load_all(cli(["config"], env, app_dir).stdout))  # one document per app
        assert [d["applications"][0]["name"] for d in shown] == ["greeter", "reader"]
        assert shown[0]["applications"][0]["args"] == {"greeting": "one"}
        assert shown[0]["http_options"]["port"] == port

        write("two", with_reader=False)  # redeploy: a rolling update to the new arguments; reader dropped
        out = cli(["deploy", str(config)], env, app_dir).stdout
        assert "Deleting app 'reader'" in out
        wait_until(lambda: get_json(f"http://127.0.0.1:{port}/") == {"msg": "two"}, 120, "the redeployed app")
        wait_until(lambda: "reader" not in yaml.safe_load(cli(["status"], env, app_dir).stdout)["applications"],
                   60, "the dropped app to go")

        cli(["shutdown", "-y"], env, app_dir)
        wait_until(lambda: get_json(f"http://127.0.0.1:{port}/") is None, 60, "Serve to stop answering")
        after = yaml.safe_load(cli(["status"], env, app_dir).stdout)
        assert after["applications"] == {}
    finally:
        subprocess.run([sys.executable, "-m", "raylite.cli", "stop"], env=env, capture_output=True, timeout=120)


def test_deploy_without_a_cluster_is_a_clear_error(app_dir, env):
    config = app_dir / "serve.yaml"
    config.write_text("applications:\n- import_path: hello_cli:app\n")
    result = cli(["deploy", str(config)], env, app_dir, timeout=120, check=False)
    assert result.returncode == 1
    assert "raylite start --head" in result.stderr


def test_build_writes_a_config_that_run_accepts(app_dir, env):
    import yaml

    out = app_dir / "built.yaml"
    cli(["build", "hello_cli:app", "-o", str(out)], env, app_dir, timeout=120)
    doc = yaml.safe_load(out.read_text())
    assert doc["applications"][0]["import_path"] == "hello_cli:app"
    assert doc["applications"][0]["deployments"] == [{"name": "Hello", "ray_actor_options": {"num_cpus": 0}}]
    from raylite.serve.schema import parse_config_file

    parse_config_file(str(out))


def test_port_in_use_is_a_clear_error_and_leaves_nothing_running(app_dir, env):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(["run", "hello_cli:app", "--port", str(port)], env, app_dir, timeout=180, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    # the local cluster it started announced its dashboard link first; then one error line
    lines = [line for line in result.stderr.splitlines() if not line.startswith("Started a local raylite cluster")]
    assert lines[0].startswith("Error: ") and "Traceback" not in result.stderr
    assert f"{port}" in result.stderr and "already in use" in result.stderr and "--port" in result.stderr
    wait_until(lambda: not processes_using(env["RAYLITE_TEMP_DIR"]), 30, "the local cluster to stop")


def test_a_constructor_error_fails_with_the_replica_traceback(app_dir, env):
    result = cli(["run", "hello_cli:broken", "--port", str(free_port())], env, app_dir, timeout=180, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the model file is missing" in result.stderr and "ValueError" in result.stderr
    wait_until(lambda: not processes_using(env["RAYLITE_TEMP_DIR"]), 30, "the local cluster to stop")


@pytest.mark.slow
def test_serve_run_reload_redeploys_on_save_and_survives_a_broken_edit(app_dir, env, tmp_path):
    port = free_port()
    log = tmp_path / "run.log"
    source = app_dir / "hello_cli.py"
    with serve_run(["hello_cli:app", "--port", str(port), "--reload"], env, app_dir, log) as proc:
        assert wait_until(lambda: get_json(f"http://127.0.0.1:{port}/"), 120, "the app") == {"msg": "hello"}
        source.write_text(APP + "\nthis is not python\n")
        wait_until(lambda: "Redeploy failed" in open(log).read(), 60, "the broken edit to be reported")
        assert get_json(f"http://127.0.0.1:{port}/") == {"msg": "hello"}  # the running version stays
        source.write_text(APP.replace('greeting: str = "hello"', 'greeting: str = "edited"'))
        wait_until(lambda: get_json(f"http://127.0.0.1:{port}/") == {"msg": "edited"}, 120, "the redeploy")
        interrupt_and_wait(proc, port, log, env["RAYLITE_TEMP_DIR"])
