"""`ray.serve.llm.deployment`'s public name: the LLMServer deployment class."""

from raylite.serve.llm._internal.server import LLMServer

__all__ = ["LLMServer"]
