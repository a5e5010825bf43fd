"""The model's tokenizer on the replica: chat template, token counts, detokenizing ids."""

from __future__ import annotations

from typing import Any


class Tokenizer:
    """A Hugging Face tokenizer with the few calls LLMServer and the engines need."""

    def __init__(self, source: str, **kwargs: Any) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(source, **kwargs)

    @property
    def eos_token_id(self) -> int | None:
        return self._tok.eos_token_id

    @property
    def pad_token_id(self) -> int:
        tok = self._tok
        return tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str:
        if not getattr(self._tok, "chat_template", None):
            raise ValueError("this model's tokenizer has no chat template, so /v1/chat/completions "
                             "cannot format messages; use /v1/completions with a plain prompt, or "
                             "give the tokenizer a chat_template")
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        return self._tok.decode([token_id])

    @property
    def hf(self) -> Any:
        return self._tok
