"""The processor and stage configurations of `raylite.data.llm`, under Ray 2.60's names and fields.

A config is the spec of a processor (what the user asked for); `build_processor` turns it into
Data stages. Ray's legacy booleans (`apply_chat_template`, `chat_template`, `tokenize`,
`detokenize`) still work and map onto the nested stage configs, as in Ray.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True,
                              protected_namespaces=())


def _check_concurrency(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"`concurrency` must be a positive int or a (min, max) tuple, not {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"A positive integer for `concurrency` is expected! Got: `{value}`.")
    elif isinstance(value, (tuple, list)):
        if len(value) != 2 or not all(isinstance(c, int) and c > 0 for c in value):
            raise ValueError(f"`concurrency` tuple items must be positive integers! Got: `{value}`.")
        if value[0] > value[1]:
            raise ValueError(f"min > max in the concurrency tuple `{tuple(value)}`!")
        return tuple(value)
    return value


class ProcessorConfig(_Model):
    """What every processor has: rows per batch, the accelerator type of its LLM stage, and
    its number of workers (an int n: an autoscaling pool of 1..n; a tuple (m, n): m..n)."""

    batch_size: int = Field(default=32, gt=0)
    resources_per_bundle: dict[str, float] | None = None  # deprecated in Ray; accepted, unused
    accelerator_type: str | None = None
    concurrency: Union[int, tuple[int, int]] = 1
    experimental: dict[str, Any] = Field(default_factory=dict)

    _check = field_validator("concurrency")(classmethod(lambda cls, v: _check_concurrency(v)))

    def get_concurrency(self, autoscaling_enabled: bool = True) -> dict[str, int]:
        """{'min_size': 1, 'max_size': n} for an int n (or {'size': n} without autoscaling);
        {'min_size': m, 'max_size': n} for a tuple."""
        if isinstance(self.concurrency, int):
            if autoscaling_enabled:
                return {"min_size": 1, "max_size": self.concurrency}
            return {"size": self.concurrency}
        return {"min_size": self.concurrency[0], "max_size": self.concurrency[1]}


class _StageConfig(_Model):
    enabled: bool = True
    batch_size: int | None = None
    concurrency: Union[int, tuple[int, int]] | None = None
    runtime_env: dict[str, Any] | None = None
    num_cpus: float | None = None
    memory: float | None = None
    model_source: str | None = None


class ChatTemplateStageConfig(_StageConfig):
    """The chat template stage: `messages` (OpenAI format) -> `prompt`."""

    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class TokenizerStageConfig(_StageConfig):
    """The tokenize stage: `prompt` -> `tokenized_prompt`."""


class DetokenizeStageConfig(_StageConfig):
    """The detokenize stage: `generated_tokens` -> `generated_text`."""


_LEGACY = (("tokenize_stage", "tokenize"), ("detokenize_stage", "detokenize"))


class OfflineProcessorConfig(ProcessorConfig):
    """A processor that runs the model itself (in Data's actors)."""

    model_source: str
    runtime_env: dict[str, Any] | None = None
    max_pending_requests: int | None = None
    max_concurrent_batches: int = Field(default=8, gt=0)
    max_tasks_in_flight_per_actor: int | None = None
    should_continue_on_error: bool = False
    apply_chat_template: bool = True
    chat_template: str | None = None
    tokenize: bool = True
    detokenize: bool = True
    has_image: bool = False
    chat_template_stage: Any = True
    tokenize_stage: Any = True
    detokenize_stage: Any = True
    prepare_image_stage: Any = False
    prepare_multimodal_stage: Any = False

    @model_validator(mode="before")
    @classmethod
    def _legacy_flags(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        values = dict(values)
        if "chat_template_stage" not in values and ("apply_chat_template" in values or "chat_template" in values):
            stage: dict[str, Any] = {"enabled": values.get("apply_chat_template", True)}
            if values.get("chat_template") is not None:
                stage["chat_template"] = values["chat_template"]
            values["chat_template_stage"] = stage
        for stage_field, legacy in _LEGACY:
            if stage_field not in values and legacy in values:
                values[stage_field] = {"enabled": bool(values[legacy])}
        for name in ("prepare_image_stage", "prepare_multimodal_stage"):
            if resolve_stage(values.get(name, False), _StageConfig, {}).enabled:
                raise ValueError(f"vLLMEngineProcessorConfig({name}=...): image and multimodal inputs are "
                                 "not supported by raylite.data.llm yet; send text prompts or messages.")
        if values.get("has_image"):
            raise ValueError("vLLMEngineProcessorConfig(has_image=True): image inputs are not supported by "
                             "raylite.data.llm yet; send text prompts or messages.")
        return values


class vLLMEngineProcessorConfig(OfflineProcessorConfig):  # noqa: N801 - Ray's name
    """A processor whose LLM stage is a vLLM engine per Data actor (Ray 2.60's fields)."""

    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    task_type: Literal["embed", "score", "generate", "classify"] = "generate"
    log_engine_metrics: bool = True
    dynamic_lora_loading_path: str | None = None
    placement_group_config: dict[str, Any] | None = None

    def check_supported(self) -> None:
        """Raise for what raylite.data.llm cannot run yet (at build time: Ray's examples build
        such configs without running them)."""
        if self.task_type != "generate":
            raise ValueError(f"vLLMEngineProcessorConfig(task_type={self.task_type!r}): raylite.data.llm "
                             "runs 'generate' only so far; embed/score/classify are not yet supported.")
        if self.dynamic_lora_loading_path is not None:
            raise ValueError("vLLMEngineProcessorConfig(dynamic_lora_loading_path=...): LoRA in batch "
                             "processors is not yet supported by raylite.data.llm.")
        tp = int(self.engine_kwargs.get("tensor_parallel_size", 1))
        pp = int(self.engine_kwargs.get("pipeline_parallel_size", 1))
        if tp * pp > 1:
            raise ValueError(f"vLLMEngineProcessorConfig(engine_kwargs tensor_parallel_size={tp}, "
                             f"pipeline_parallel_size={pp}): one engine per Data actor on one device so "
                             "far; raise `concurrency` for more engines instead.")


class HttpRequestStageConfig(_StageConfig):
    """The HTTP request stage (Ray's name); its options come from HttpRequestProcessorConfig."""


class HttpRequestProcessorConfig(ProcessorConfig):
    """A processor that posts each row's `payload` to an OpenAI-compatible `url` (Ray's fields)."""

    batch_size: int = Field(default=64, gt=0)
    url: str
    headers: dict[str, Any] | None = None
    qps: int | None = None
    max_retries: int = 0
    base_retry_wait_time_in_s: float = 1
    session_factory: Any | None = None
    http_request_stage: Any = True


def resolve_stage(value: Any, kind: type[_StageConfig], defaults: dict[str, Any]) -> Any:
    """A stage field (bool | dict | typed config) as a typed config, unset fields from the
    processor's (`defaults`: batch_size, concurrency, runtime_env, model_source)."""
    if isinstance(value, bool) or value is None:
        cfg = kind(enabled=bool(value))
    elif isinstance(value, dict):
        cfg = kind(**value)
    elif isinstance(value, _StageConfig):
        cfg = kind(**value.model_dump())
    else:
        raise TypeError(f"a stage config must be a bool, a dict or {kind.__name__}, not {type(value).__name__}")
    for key, default in defaults.items():
        if key in kind.model_fields and getattr(cfg, key) is None:
            setattr(cfg, key, default)
    return cfg
