"""A stand-in for vLLM's offline API (LLM, SamplingParams) so the seed's Serve sample runs on CPU."""

from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16


@dataclass
class _Completion:
    text: str


@dataclass
class _RequestOutput:
    prompt: str
    outputs: list


class LLM:
    def __init__(self, model: str, **kwargs) -> None:
        self.model = model

    def generate(self, prompts: list, params: SamplingParams | None = None) -> list:
        return [_RequestOutput(p, [_Completion(f"[{self.model}] answer to: {p.splitlines()[-3]}")]) for p in prompts]
