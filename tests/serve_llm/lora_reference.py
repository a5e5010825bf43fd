"""Greedy tokens of one vLLM engine in one process for the base model and each LoRA adapter (the
reference Serve's multi-LoRA must reproduce): `python -m tests.serve_llm.lora_reference MODEL
PROMPT_IDS MAX_TOKENS NAME=PATH...`; prints JSON {name or "base": text} on a line `REFERENCE `."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    model, prompt, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    adapters = dict(a.split("=", 1) for a in sys.argv[4:])
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    llm = LLM(model=model, enforce_eager=True, dtype="float32", max_model_len=256,
              distributed_executor_backend="uni", enable_lora=True, max_loras=2, max_lora_rank=8)
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    out = {"base": llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0].outputs[0].text}
    for i, (name, path) in enumerate(sorted(adapters.items()), start=1):
        got = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False,
                           lora_request=LoRARequest(name, i, path))
        out[name] = got[0].outputs[0].text
    print("REFERENCE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
