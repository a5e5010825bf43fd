"""Ray 2.60's own command-line tools against a raylite head started with RAY_AUTH_TOKEN set:
`ray job`, `serve deploy/status/shutdown` and the state CLI (`ray list`, `ray get`,
`ray summary`), run from a Ray virtualenv (RAYLITE_TEST_RAY_VENV, default /opt/rayvenv) with
only Ray's own variables (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN, RAY_ADDRESS): Ray's clients send
`Authorization: Bearer <RAY_AUTH_TOKEN>` and have no --headers option."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap

import httpx
import pytest

from ..cluster.conftest import free_port, wait_until

RAY_VENV = os.environ.get("RAYLITE_TEST_RAY_VENV", "/opt/rayvenv")
RAY = os.path.join(RAY_VENV, "bin", "ray")
SERVE = os.path.join(RAY_VENV, "bin", "serve")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (os.access(RAY, os.X_OK) and os.access(SERVE, os.X_OK)),
                       reason=f"Ray's CLIs are not installed in {RAY_VENV} (set RAYLITE_TEST_RAY_VENV)"),
]

JOB = textwrap.dedent("""
    import raylite

    raylite.init()

    @raylite.remote
    class Keeper:
        def ping(self):
            return "pong"

    @raylite.remote
    def square_it(x):
        return x * x

    keeper = Keeper.options(name="keeper", lifetime="detached", namespace="clis").remote()
    print("ping", raylite.get(keeper.ping.remote()))
    print("squares", sum(raylite.get([square_it.remote(i) for i in range(5)])))
""")

APP = textwrap.dedent("""
    from raylite import serve

    @serve.deployment
    class Echo:
        def __init__(self, word: str):
            self.word = word

        def __call__(self, request):
            return self.word

    def build(args):
        return Echo.bind(args["word"])
""")


class Head:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="rlclis", dir="/tmp")
        self.token = secrets.token_hex(16)
        self.port, self.api_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.raylite_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYLITE_", "RAY_"))}
        self.raylite_env.update(RAYLITE_TEMP_DIR=os.path.join(self.dir, "tmp"), RAY_AUTH_MODE="token",
                                RAY_AUTH_TOKEN=self.token)
        # Ray's CLIs get Ray's variables only
        self.ray_env = {k: v for k, v in self.raylite_env.items() if not k.startswith("RAYLITE_")}
        self.ray_env.update(RAY_ADDRESS=self.url, RAY_DASHBOARD_ADDRESS=self.url, PYTHONPATH="")

    def raylite(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "raylite.cli", *args], env=self.raylite_env,
                              capture_output=True, text=True, timeout=120)

    def ray(self, tool: str, *args: str, check: bool = True) -> str:
        out = subprocess.run([tool, *args], env=self.ray_env, capture_output=True, text=True, timeout=180,
                             cwd=self.dir)
        text = out.stdout + out.stderr
        if check:
            assert out.returncode == 0, f"{os.path.basename(tool)} {' '.join(args)} failed:\n{text}"
        return text

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)


@pytest.fixture(scope="module")
def head():
    h = Head()
    out = h.raylite("start", "--head", f"--port={h.port}", "--node-ip-address=127.0.0.1", "--num-cpus=4",
                    f"--dashboard-port={h.api_port}")
    assert out.returncode == 0, out.stderr
    try:
        yield h
    finally:
        h.raylite("stop")
        shutil.rmtree(h.dir, ignore_errors=True)




def test_ray_job_cli(head):
    script = os.path.join(head.dir, "job_script.py")
    with open(script, "w") as f:
        f.write(JOB)
    text = head.ray(RAY, "job", "submit", "--submission-id", "clis-job-1", "--", sys.executable, script)
    assert "ping pong" in text and "squares 30" in text and "succeeded" in text
    assert "clis-job-1' succeeded" in head.ray(RAY, "job", "status", "clis-job-1")
    assert "squares 30" in head.ray(RAY, "job", "logs", "clis-job-1")
    assert "clis-job-1" in head.ray(RAY, "job", "list")
    dup = head.ray(RAY, "job", "submit", "--no-wait", "--submission-id", "clis-job-1", "--", "true", check=False)
    assert "status code 500" in dup and "Please use a different submission_id" in dup


def test_ray_state_cli(head):
    if "clis-job-1" not in head.get("/api/jobs/").text:
        test_ray_job_cli(head)
    actors = head.ray(RAY, "list", "actors")
    assert "Keeper" in actors and "ALIVE" in actors and "keeper" in actors
    assert "square_it" in head.ray(RAY, "list", "tasks")
    failed = head.ray(RAY, "list", "tasks", "--filter", "state=FAILED")
    assert "square_it" not in failed
    nodes = head.ray(RAY, "list", "nodes")
    node_id = head.get("/api/v0/nodes").json()["data"]["result"]["result"][0]["node_id"]
    assert node_id in nodes and "ALIVE" in nodes
    assert "SUCCEEDED" in head.ray(RAY, "list", "jobs")
    for resource in ("objects", "placement-groups", "workers"):
        head.ray(RAY, "list", resource)  # Ray's client validates every row it gets
    actor_id = next(a["actor_id"] for a in head.get("/api/v0/actors").json()["data"]["result"]["result"]
                    if a["class_name"] == "Keeper")
    assert "class_name: Keeper" in head.ray(RAY, "get", "actors", actor_id)
    assert "death_cause" in head.ray(RAY, "list", "actors", "--detail")
    assert f"node_id: {node_id}" in head.ray(RAY, "get", "nodes", node_id)
    task_id = next(t["task_id"] for t in head.get("/api/v0/tasks").json()["data"]["result"]["result"]
                   if t["name"] == "square_it")
    assert "func_or_class_name: square_it" in head.ray(RAY, "get", "tasks", task_id)
    worker_id = head.get("/api/v0/workers").json()["data"]["result"]["result"][0]["worker_id"]
    assert f"worker_id: {worker_id}" in head.ray(RAY, "get", "workers", worker_id)
    tasks = head.ray(RAY, "summary", "tasks")
    assert "square_it" in tasks and "FINISHED: 5" in tasks
    assert "Keeper" in head.ray(RAY, "summary", "actors")
    head.ray(RAY, "summary", "objects")


def test_serve_cli(head):
    app_dir = os.path.join(head.dir, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "echo_app.py"), "w") as f:
        f.write(APP)
    http_port = free_port()
    config = os.path.join(head.dir, "serve_config.yaml")
    with open(config, "w") as f:
        f.write(textwrap.dedent(f"""
            proxy_location: HeadOnly
            http_options:
              host: 127.0.0.1
              port: {http_port}
            applications:
              - name: echo
                route_prefix: /echo
                import_path: echo_app:build
                args:
                  word: hej
                runtime_env:
                  working_dir: local://{app_dir}
                deployments:
                  - name: Echo
                    num_replicas: 1
        """))
    assert "Sent deploy request successfully" in head.ray(SERVE, "deploy", config, "--address", head.url)
    wait_until(lambda: head.get("/api/serve/applications/").json()["applications"].get("echo", {}).get("status")
         == "RUNNING", 120, "the echo app RUNNING")
    assert httpx.get(f"http://127.0.0.1:{http_port}/echo", timeout=30).text == "hej"
    status = head.ray(SERVE, "status", "--address", head.url)
    assert "echo:" in status and "status: RUNNING" in status and "Echo:" in status and "HEALTHY" in status
    assert "status: RUNNING" in head.ray(SERVE, "status", "--name", "echo", "--address", head.url)
    shown = head.ray(SERVE, "config", "--address", head.url)
    assert "import_path: echo_app:build" in shown and "word: hej" in shown
    # deploying the same file again keeps the running replica
    before = head.get("/api/serve/applications/").json()["applications"]["echo"]["deployments"]["Echo"]["replicas"]
    head.ray(SERVE, "deploy", config, "--address", head.url)
    after = head.get("/api/serve/applications/").json()["applications"]["echo"]["deployments"]["Echo"]["replicas"]
    assert [r["replica_id"] for r in after] == [r["replica_id"] for r in before]
    assert "Sent shutdown request" in head.ray(SERVE, "shutdown", "-y", "--address", head.url)
    assert head.get("/api/serve/applications/").json()["applications"] == {}
    assert "No Serve instance found" in head.ray(SERVE, "shutdown", "-y", "--address", head.url)
