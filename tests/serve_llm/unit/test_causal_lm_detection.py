"""The transformers fallback engine tells generating models from embedding models by asking
transformers' causal-LM mapping, not by the "ForCausalLM" suffix (GPT-2 is GPT2LMHeadModel)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from raylite.serve.llm._internal.hf_engine import is_causal_lm  # noqa: E402


@pytest.mark.parametrize(("config", "causal"), [
    (transformers.GPT2Config(architectures=["GPT2LMHeadModel"]), True),
    (transformers.LlamaConfig(architectures=["LlamaForCausalLM"]), True),
    (transformers.BertConfig(architectures=["BertModel"]), False),
    (transformers.BertConfig(architectures=["BertLMHeadModel"]), True),
    (transformers.GPT2Config(), True),  # no architectures: the model type decides
    (transformers.CLIPTextConfig(), False),
])
def test_causal_lm_detection(config, causal):
    assert is_causal_lm(config) is causal
