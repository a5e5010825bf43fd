"""`raylite.data.llm` (Ray's `ray.data.llm`): batch inference with LLMs over a Dataset.

    config = vLLMEngineProcessorConfig(model_source=path, engine_kwargs={...}, batch_size=32)
    processor = build_processor(config, preprocess=lambda row: {...}, postprocess=lambda row: {...})
    ds = processor(raylite.data.from_items(rows))

`build_llm_processor` is the name older Ray releases used for `build_processor`.
"""

from raylite.data._internal.llm.configs import (
    ChatTemplateStageConfig,
    DetokenizeStageConfig,
    HttpRequestProcessorConfig,
    HttpRequestStageConfig,
    ProcessorConfig,
    TokenizerStageConfig,
    vLLMEngineProcessorConfig,
)
from raylite.data._internal.llm.processor import Processor, build_processor

build_llm_processor = build_processor

__all__ = [
    "ChatTemplateStageConfig", "DetokenizeStageConfig", "HttpRequestProcessorConfig", "HttpRequestStageConfig",
    "Processor", "ProcessorConfig", "TokenizerStageConfig", "build_llm_processor", "build_processor",
    "vLLMEngineProcessorConfig",
]
