"""Greedy tokens from one vLLM engine in one process (no parallelism): the reference the
multi-node engines must reproduce. Run as a script (vLLM spawns its engine core, which
re-imports __main__): `python -m tests.serve_llm.one_process_engine MODEL PROMPT_IDS MAX_TOKENS`;
prints the completion's token ids and text as JSON on a line starting `REFERENCE ` (vLLM
logs to stdout too)."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    model, prompt, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model, enforce_eager=True, dtype="float32", max_model_len=256,
              distributed_executor_backend="uni")
    out = llm.generate([TokensPrompt(prompt_token_ids=prompt)],
                       SamplingParams(temperature=0, max_tokens=max_tokens))
    done = out[0].outputs[0]
    print("REFERENCE " + json.dumps({"token_ids": list(done.token_ids), "text": done.text}), flush=True)


if __name__ == "__main__":
    main()
