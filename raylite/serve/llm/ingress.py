"""`ray.serve.llm.ingress`'s public name: the OpenAiIngress deployment class (no engine import)."""

from raylite.serve.llm._internal.ingress import OpenAiIngress

__all__ = ["OpenAiIngress"]
