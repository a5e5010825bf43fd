"""Batch inference benchmark: prompts through raylite.data.llm's build_processor vs the same
prompts through `vllm.LLM.generate` in one process (the bare engine), same tiny Llama-style
model (built locally), same engine arguments, greedy decoding with a fixed number of tokens.

Each side runs in a fresh process, alternating, `--rounds` times; the medians are printed:
wall time from the start of the process's work (engine start included on both sides: the
processor's engine starts inside its Data actor) and output tokens/s over that wall time,
plus the bare engine's generate() time alone. Ray 2.60's ray.data.llm is tried in
/opt/rayvenv: it needs vLLM installed next to Ray, and where it does not import its row says why.

    python bench/llm_batch.py [--prompts 2000] [--max-tokens 16] [--rounds 3] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RAY_PYTHON = "/opt/rayvenv/bin/python"
ENGINE = {"max_model_len": 256, "enforce_eager": True, "dtype": "float32", "max_num_seqs": 256}

BARE = textwrap.dedent("""
    import json, os, sys, time
    t0 = time.perf_counter()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    model, n, max_tokens, engine = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    llm = LLM(model=model, distributed_executor_backend="uni", **engine)
    prompts = [f"Hello number {i}, tell me a story" for i in range(n)]
    t1 = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True),
                        use_tqdm=False)
    t2 = time.perf_counter()
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    print("RESULT " + json.dumps({"wall_s": t2 - t0, "generate_s": t2 - t1, "tokens": tokens}), flush=True)
""")

PROCESSOR = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import {pkg} as ray
    from {pkg}.data.llm import build_processor, vLLMEngineProcessorConfig
    model, n, max_tokens, engine, batch_size = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                json.loads(sys.argv[4]), int(sys.argv[5]))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = vLLMEngineProcessorConfig(model_source=model, engine_kwargs=engine, batch_size=batch_size,
                                       concurrency=1, chat_template_stage=False)
    processor = build_processor(config, preprocess=lambda row: {{
        "prompt": f"Hello number {{row['id']}}, tell me a story",
        "sampling_params": {{"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True}}}},
        postprocess=lambda row: {{"n": row["num_generated_tokens"]}})
    rows = processor(ray.data.range(n)).take_all()
    t2 = time.perf_counter()
    print("RESULT " + json.dumps({{"wall_s": t2 - t0, "tokens": sum(r["n"] for r in rows)}}), flush=True)
""")


def run(python: str, code: str, argv: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run([python, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=3600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[-400:]}
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    from tests.serve_llm.tiny_model import build_tiny_llama

    model = build_tiny_llama(tempfile.mkdtemp(prefix="llm-batch-"))
    common = [model, str(args.prompts), str(args.max_tokens), json.dumps(ENGINE)]
    # a cluster of its own, even where `raylite start` left one running on this machine
    env = {"RAYLITE_TEMP_DIR": tempfile.mkdtemp(prefix="rlbench", dir="/tmp"), "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    results: dict[str, list[dict]] = {"bare vllm.LLM.generate": [], "raylite build_processor": []}
    for _ in range(args.rounds):  # alternating, so a busy moment of the machine hits both
        results["bare vllm.LLM.generate"].append(run(sys.executable, BARE, common, env))
        results["raylite build_processor"].append(
            run(sys.executable, PROCESSOR.format(pkg="raylite"), [*common, str(args.batch_size)], env))
    ray = run(RAY_PYTHON, PROCESSOR.format(pkg="ray"), [*common, str(args.batch_size)]) \
        if os.path.exists(RAY_PYTHON) else {"error": "no /opt/rayvenv"}
    print(f"{args.prompts} prompts x {args.max_tokens} tokens, batch_size {args.batch_size}, "
          f"medians of {args.rounds} alternating runs")
    print(f"{'':28} {'wall s':>9} {'tokens/s':>10} {'generate s':>11}")
    medians = {}
    for name, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            print(f"{name:28} failed: {runs[0].get('error')}")
            continue
        wall = statistics.median(r["wall_s"] for r in ok)
        tps = statistics.median(r["tokens"] / r["wall_s"] for r in ok)
        gen = statistics.median(r["generate_s"] for r in ok) if "generate_s" in ok[0] else None
        medians[name] = tps
        print(f"{name:28} {wall:9.1f} {tps:10.1f} {gen if gen is not None else float('nan'):11.1f}")
    if len(medians) == 2:
        ratio = medians["raylite build_processor"] / medians["bare vllm.LLM.generate"]
        print(f"raylite / bare tokens/s: {ratio:.1%} (goal >= 90%)")
    print(f"{'Ray 2.60 ray.data.llm':28} " + (f"{ray['wall_s']:9.1f} {ray['tokens'] / ray['wall_s']:10.1f}"
                                            if "error" not in ray else f"not run: {ray['error']}"))


if __name__ == "__main__":
    main()
