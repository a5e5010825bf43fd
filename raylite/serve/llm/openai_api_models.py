"""OpenAI request bodies and error objects, as pydantic models (Ray: `ray.serve.llm.openai_api_models`).

The ingress validates every request here before it reaches a model, so a bad field comes back
as OpenAI's 400 error naming the field, and this module imports only pydantic: the ingress
runs on nodes that have no engine installed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Request(BaseModel):
    """Common sampling fields of /v1/chat/completions and /v1/completions."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    user: str | None = None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text; OpenAI's content parts of type "text" are joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: `logprobs` must be true when `top_logprobs` is set")
        return self

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False

    def token_limit(self) -> int | None:
        return self.max_tokens


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class OpenAIHTTPError(Exception):
    """An error to send back as OpenAI's error object with an HTTP status."""

    def __init__(self, status_code: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def error_body(status_code: int, message: str, *, type: str = "invalid_request_error",
               param: str | None = None, code: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, OpenAI error object): what LLMServer returns instead of raising for a client error."""
    return status_code, OpenAIHTTPError(status_code, message, type=type, param=param, code=code).body()


def model_not_found(model: str) -> OpenAIHTTPError:
    return OpenAIHTTPError(404, f"The model `{model}` does not exist.", param="model",
                           code="model_not_found")


def from_validation_error(exc: ValidationError) -> OpenAIHTTPError:
    """A 400 naming the first invalid field (OpenAI's `param`) and why it is invalid."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    if not loc and ":" in msg:  # a model-level check names its field first ("top_logprobs: ...")
        loc = msg.split(":", 1)[0].removeprefix("Value error, ").strip()
    param = loc or None
    message = f"Invalid value for `{loc}`: {msg}" if loc else f"Invalid request: {msg}"
    return OpenAIHTTPError(400, message, param=param, code="invalid_value")


__all__ = [
    "ChatCompletionRequest", "ChatMessage", "CompletionRequest", "EmbeddingRequest",
    "OpenAIHTTPError", "error_body", "from_validation_error", "model_not_found",
]
