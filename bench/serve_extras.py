"""Serve's in-replica helpers, raylite vs Ray 2.60: `@serve.batch` and `@serve.multiplexed`.

    python bench/serve_extras.py                     # raylite, and Ray from /opt/rayvenv if found
    python bench/serve_extras.py --no-ray

No cluster: both decorators are plain asyncio inside one process (a replica's event loop), so
this measures the per-call cost they add on top of the user's function, which Serve pays on every
request. Each framework runs in its own interpreter (`--worker NAME`); numbers are medians of
several rounds:

- batch: 256 concurrent callers, `max_batch_size=32`, an instant batch function -> calls/s.
- batch streaming: 64 callers, an async-generator batch function yielding 8 items -> items/s.
- multiplexed hit: `await self.get_model(id)` on a cached model (2 ids, LRU of 3) -> lookups/s.

And the command line (skip with `--no-cli`): `serve run serve.yaml` (one app, `hello:app`) in a
fresh process with a cluster of its own, to the first HTTP 200; then Ctrl-C to the process gone.
Ray's `serve` from its virtualenv against raylite's, one round each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Metric, collect_worker_metrics, emit, median, render_table, section  # noqa: E402

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
METRICS = [
    Metric("batch_calls_per_s", "@serve.batch, 256 concurrent callers", "calls/s", False),
    Metric("batch_stream_items_per_s", "@serve.batch streaming, 64 callers x 8 items", "items/s", False),
    Metric("multiplex_hits_per_s", "@serve.multiplexed cache hit", "lookups/s", False),
    Metric("cli_run_to_first_200_s", "`serve run serve.yaml` to the first 200", "s", True),
    Metric("cli_ctrl_c_to_exit_s", "Ctrl-C to `serve run` gone", "s", True),
]
METRICS_BY_NAME = {m.name: m for m in METRICS}
ROUNDS = 5


def _decorators(name: str):
    if name == "ray":  # Ray's decorators insist on a replica context: give them a minimal one
        from ray import serve
        from ray.serve import context, multiplex
        from ray.serve._private.common import DeploymentID, ReplicaID
        from ray.serve._private.config import DeploymentConfig
        from ray.serve.schema import ReplicaRank

        context._set_internal_replica_context(
            replica_id=ReplicaID("bench", DeploymentID("d", "app")), servable_object=None,
            _deployment_config=DeploymentConfig(max_ongoing_requests=1000),
            rank=ReplicaRank(rank=0, node_rank=0, local_rank=0), world_size=1)
        # its background push of model ids to a controller would start a whole Ray cluster here
        multiplex._ModelMultiplexWrapper._push_model_ids_info = lambda self: None
        return serve.batch, serve.multiplexed
    from raylite.serve.batching import batch
    from raylite.serve.multiplex import multiplexed
    return batch, multiplexed


def run_worker(name: str) -> None:
    batch, multiplexed = _decorators(name)

    class Model:
        @batch(max_batch_size=32, batch_wait_timeout_s=0.001)
        async def predict(self, xs):
            return [x + 1 for x in xs]

        @batch(max_batch_size=32, batch_wait_timeout_s=0.001)
        async def stream(self, xs):
            for i in range(8):
                yield [x + i for x in xs]

        @multiplexed(max_num_models_per_replica=3)
        async def get_model(self, model_id: str):
            return model_id.upper()

    model = Model()

    async def batch_round() -> float:
        n = 256 * 20
        start = time.perf_counter()
        for _ in range(20):
            await asyncio.gather(*(model.predict(i) for i in range(256)))
        return n / (time.perf_counter() - start)

    async def stream_round() -> float:
        async def consume(i):
            return sum([1 async for _ in model.stream(i)])
        start = time.perf_counter()
        total = 0
        for _ in range(10):
            total += sum(await asyncio.gather(*(consume(i) for i in range(64))))
        return total / (time.perf_counter() - start)

    async def multiplex_round() -> float:
        n = 50_000
        start = time.perf_counter()
        for i in range(n):
            await model.get_model("a" if i % 2 else "b")
        return n / (time.perf_counter() - start)

    async def main() -> None:
        for metric, fn in (("batch_calls_per_s", batch_round), ("batch_stream_items_per_s", stream_round),
                           ("multiplex_hits_per_s", multiplex_round)):
            with section(name, metric):
                await fn()  # warm-up
                values = [await fn() for _ in range(ROUNDS)]
                emit({"framework": name, "metric": metric, "value": median(values)})

    asyncio.run(main())


HELLO_APP = """
from {module} import serve


@serve.deployment
class Hello:
    async def __call__(self, request):
        return "hello"


app = Hello.bind()
"""


def measure_cli(name: str, serve_cmd: list[str]) -> dict[str, float]:
    """Seconds from `serve run serve.yaml` to the first 200, and from SIGINT to the process gone."""
    import signal
    import socket
    import subprocess
    import tempfile
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="rls-bench-", dir="/tmp") as folder:
        with open(os.path.join(folder, "hello.py"), "w") as f:
            f.write(HELLO_APP.format(module="ray" if name == "ray" else "raylite"))
        with open(os.path.join(folder, "serve.yaml"), "w") as f:  # Ray 2.60's `serve run` has no --port
            f.write(f"http_options: {{host: 127.0.0.1, port: {port}}}\n"
                    "applications:\n- {name: default, route_prefix: /, import_path: hello:app}\n")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAYLITE_TEMP_DIR=os.path.join(folder, "s"))
        if name == "ray":
            env.pop("PYTHONPATH", None)
        start = time.perf_counter()
        proc = subprocess.Popen([*serve_cmd, "run", "serve.yaml"], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = start + 180
            while True:
                if time.perf_counter() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{name}: serve run did not answer within 180 s (exit {proc.poll()})")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.05)
            ready = time.perf_counter() - start
            stop = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
            return {"cli_run_to_first_200_s": ready, "cli_ctrl_c_to_exit_s": time.perf_counter() - stop}
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["raylite", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-cli", action="store_true", help="skip the `serve run` timings")
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker)
        return
    results = {"raylite": collect_worker_metrics(
        "raylite", [sys.executable, os.path.abspath(__file__), "--worker", "raylite"], METRICS_BY_NAME, 300)}
    frameworks = ["raylite"]
    if not args.no_ray and os.path.exists(args.ray_python):
        results["ray"] = collect_worker_metrics(
            "ray", [args.ray_python, os.path.abspath(__file__), "--worker", "ray"], METRICS_BY_NAME, 300)
        frameworks.append("ray")
    if not args.no_cli:
        for name in frameworks:
            cmd = ([os.path.join(os.path.dirname(args.ray_python), "serve")] if name == "ray"
                   else [sys.executable, "-m", "raylite.serve.scripts"])
            with section(name, "cli"):
                for metric, value in measure_cli(name, cmd).items():
                    emit({"framework": name, "metric": metric, "value": value})
                    results[name][metric] = value
    print()
    print(render_table(METRICS, results, frameworks))


if __name__ == "__main__":
    main()
