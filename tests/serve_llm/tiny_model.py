"""A tiny Llama-style model and tokenizer built on the spot (no hub download).

Used by the Serve LLM tests and by bench/llm.py. The weights are random, so the text is
noise, but every path a real model takes (config, safetensors, tokenizer, chat template,
paged attention with head size 64) is exercised. The EOS row of the output layer is zeroed
and the other rows scaled up, so greedy and sampled generations practically never stop
early: tests can ask for N tokens and get N.
"""

from __future__ import annotations

import os

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Explain gradient checkpointing in two sentences.",
    "Ray Serve handles the serving side of machine learning.",
    "Hello world! How are you today? I am fine, thank you.",
    "Distributed training, tensor parallelism and pipeline parallelism.",
    "0123456789 + - * / = ( ) [ ] { } < > | : ; , . ! ? ' \" _",
]


def _tokenizer(path: str, vocab_size: int):
    """A byte-level BPE tokenizer trained on the small corpus above, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def build_tiny_gpt2(path: str, *, vocab_size: int = 512, seed: int = 0) -> str:
    """Write a random-weight GPT-2 (`GPT2LMHeadModel`, 2 layers) and its tokenizer to `path`:
    a causal LM whose class name does not end in ForCausalLM."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    fast = _tokenizer(path, vocab_size)
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(fast), n_positions=512, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                        pad_token_id=fast.pad_token_id)
    GPT2LMHeadModel(config).save_pretrained(path)
    return path


def build_tiny_llama(path: str, *, vocab_size: int = 512, max_position_embeddings: int = 2048,
                     seed: int = 0) -> str:
    """Write a random-weight Llama model (2 layers, head size 64) and its tokenizer to `path`.

    `vocab_size` bounds the BPE vocabulary; the model gets exactly the tokenizer's size, so no
    generated id falls outside what the tokenizer can decode.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = _tokenizer(path, vocab_size)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=max_position_embeddings, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        head = model.lm_head.weight
        head.mul_(8.0 / head.norm(dim=1, keepdim=True).mean())
        head[fast.eos_token_id].zero_()
    model.save_pretrained(path)
    return path
