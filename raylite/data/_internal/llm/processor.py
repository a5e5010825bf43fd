"""Processor: preprocess -> stages -> postprocess over a Dataset, and `build_processor`.

`build_processor(config)` reads the config's stages (chat template, tokenize, the engine or the
HTTP requests, detokenize) and returns a Processor; calling it on a Dataset adds a `map` for
preprocess, one `map_batches` per stage (the engine stage on an actor pool, each actor holding
one engine) and a `map` for postprocess. Nothing runs until the dataset is consumed; rows then
stream through the stages under Data's memory budget, with its progress bars.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raylite.data._internal.llm import configs as C
from raylite.data._internal.llm.stages import (
    ERROR_COLUMN,
    ChatTemplateUDF,
    DetokenizeUDF,
    HttpRequestUDF,
    TokenizeUDF,
)
from raylite.data._internal.llm.vllm_stage import vLLMEngineUDF
from raylite.data._internal.logical import ActorPoolStrategy

DEFAULT_MAX_TASKS_IN_FLIGHT = 16


@dataclass
class Stage:
    """One `map_batches` of a processor: the callable class, its constructor kwargs and the
    map_batches options (compute, resources)."""

    fn: type
    fn_constructor_kwargs: dict[str, Any]
    map_batches_kwargs: dict[str, Any] = field(default_factory=dict)

    def get_dataset_map_batches_kwargs(self, batch_size: int) -> dict[str, Any]:
        return {"batch_size": batch_size, "batch_format": "pyarrow",
                "fn_constructor_kwargs": self.fn_constructor_kwargs, **self.map_batches_kwargs}


class Processor:
    """preprocess -> stages -> postprocess (Ray's Processor). `processor(ds)` returns the
    processed Dataset (lazy). Rows whose engine call failed (with should_continue_on_error)
    skip postprocess and keep their `__inference_error__`."""

    def __init__(self, config: C.ProcessorConfig, stages: list[Stage], preprocess: Callable | None = None,
                 postprocess: Callable | None = None, preprocess_map_kwargs: dict[str, Any] | None = None,
                 postprocess_map_kwargs: dict[str, Any] | None = None) -> None:
        self.config = config
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.preprocess_map_kwargs = dict(preprocess_map_kwargs or {})
        self.postprocess_map_kwargs = dict(postprocess_map_kwargs or {})
        self.stages: OrderedDict[str, Stage] = OrderedDict()
        for stage in stages:
            name = stage.fn.__name__.replace("UDF", "Stage")
            if name in self.stages:
                name = f"{name}_{sum(1 for n in self.stages if n.startswith(name)) + 1}"
            self.stages[name] = stage

    def __call__(self, dataset: Any) -> Any:
        if self.preprocess is not None:
            dataset = dataset.map(self.preprocess, **self.preprocess_map_kwargs)
        for stage in self.stages.values():
            kwargs = stage.get_dataset_map_batches_kwargs(self.config.batch_size)
            dataset = dataset.map_batches(stage.fn, **kwargs)
        keep_errors = bool(getattr(self.config, "should_continue_on_error", False))
        if self.postprocess is not None or isinstance(self.config, C.OfflineProcessorConfig):
            dataset = dataset.map(_Postprocess(self.postprocess, keep_errors), **self.postprocess_map_kwargs)
        return dataset

    def list_stage_names(self) -> list[str]:
        return list(self.stages)

    def get_stage_by_name(self, name: str) -> Stage:
        if name in self.stages:
            return self.stages[name]
        raise ValueError(f"Stage {name} not found; this processor's stages are {list(self.stages)}")


class _Postprocess:
    """The user's postprocess on rows that succeeded; failed rows pass as they are (the user's
    function would not find the outputs it expects). The error column stays only with
    should_continue_on_error ("" on rows that succeeded), as in Ray."""

    def __init__(self, fn: Callable | None, keep_errors: bool) -> None:
        self.fn = fn
        self.keep_errors = keep_errors

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if row.get(ERROR_COLUMN):
            return row
        row.pop(ERROR_COLUMN, None)
        out = self.fn(row) if self.fn is not None else row
        if self.keep_errors:
            out[ERROR_COLUMN] = ""
        return out


def build_processor(config: C.ProcessorConfig, preprocess: Callable | None = None,
                    postprocess: Callable | None = None, preprocess_map_kwargs: dict[str, Any] | None = None,
                    postprocess_map_kwargs: dict[str, Any] | None = None,
                    builder_kwargs: dict[str, Any] | None = None) -> Processor:
    """The processor of `config` (a vLLMEngineProcessorConfig or HttpRequestProcessorConfig)."""
    if isinstance(config, C.vLLMEngineProcessorConfig):
        config.check_supported()
        stages = _vllm_stages(config, **(builder_kwargs or {}))
    elif isinstance(config, C.HttpRequestProcessorConfig):
        stages = _http_stages(config)
    else:
        raise ValueError(f"build_processor: no processor for {type(config).__name__}; use "
                         "vLLMEngineProcessorConfig or HttpRequestProcessorConfig")
    return Processor(config, stages, preprocess, postprocess, preprocess_map_kwargs, postprocess_map_kwargs)


# A CPU stage's actor (a tokenizer) asks for a quarter core unless told: Ray's default of one
# core each leaves a 2-core machine no room for the engine beside three tokenizer stages.
_CPU_STAGE_DEFAULT_CPUS = 0.25


def _cpu_stage_kwargs(cfg: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"compute": ActorPoolStrategy(*_pool(cfg.concurrency or 1)),
                              "num_cpus": cfg.num_cpus if cfg.num_cpus is not None else _CPU_STAGE_DEFAULT_CPUS,
                              "zero_copy_batch": True}
    if cfg.batch_size:
        kwargs["batch_size"] = cfg.batch_size
    if cfg.memory:
        kwargs["memory"] = cfg.memory
    if cfg.runtime_env:
        kwargs["runtime_env"] = cfg.runtime_env
    return kwargs


def _pool(concurrency: Any) -> tuple[int | None, int, int]:
    """(size, min_size, max_size) positional for ActorPoolStrategy: an int n -> 1..n."""
    lo, hi = tuple(concurrency) if isinstance(concurrency, (tuple, list)) else (1, int(concurrency))
    return None, lo, hi


def _vllm_stages(config: C.vLLMEngineProcessorConfig, chat_template_kwargs: dict[str, Any] | None = None) -> list[Stage]:
    import raylite

    if not raylite.is_initialized():  # as Ray's builder does: the processor needs a cluster
        raylite.init(runtime_env=config.runtime_env)
    defaults = {"batch_size": config.batch_size, "concurrency": config.concurrency,
                "runtime_env": config.runtime_env, "model_source": config.model_source}
    trust = bool(config.engine_kwargs.get("trust_remote_code", False))
    stages = []
    chat = C.resolve_stage(config.chat_template_stage, C.ChatTemplateStageConfig, defaults)
    if chat.enabled:
        stages.append(Stage(ChatTemplateUDF, {
            "model": chat.model_source, "chat_template": chat.chat_template or config.chat_template,
            "chat_template_kwargs": chat.chat_template_kwargs or chat_template_kwargs,
            "trust_remote_code": trust}, _cpu_stage_kwargs(chat)))
    tok = C.resolve_stage(config.tokenize_stage, C.TokenizerStageConfig, defaults)
    if tok.enabled:
        stages.append(Stage(TokenizeUDF, {"model": tok.model_source, "trust_remote_code": trust},
                            _cpu_stage_kwargs(tok)))
    detok = C.resolve_stage(config.detokenize_stage, C.DetokenizeStageConfig, defaults)
    engine_options: dict[str, Any] = {
        "compute": ActorPoolStrategy(**config.get_concurrency(autoscaling_enabled=True),
                                     max_tasks_in_flight_per_actor=int(
                                         config.max_tasks_in_flight_per_actor or config.experimental.get(
                                             "max_tasks_in_flight_per_actor", DEFAULT_MAX_TASKS_IN_FLIGHT))),
        "max_concurrency": config.max_concurrent_batches, "zero_copy_batch": True}
    if config.accelerator_type or raylite.cluster_resources().get("GPU", 0) > 0:
        engine_options["num_gpus"] = 1
        if config.accelerator_type:
            engine_options["accelerator_type"] = config.accelerator_type
    else:
        engine_options["num_cpus"] = 1
    if config.runtime_env:
        engine_options["runtime_env"] = config.runtime_env
    stages.append(Stage(vLLMEngineUDF, {
        "model": config.model_source, "engine_kwargs": dict(config.engine_kwargs),
        "should_continue_on_error": config.should_continue_on_error,
        "detokenize_in_engine": not detok.enabled,
        "max_pending_requests": config.max_pending_requests}, engine_options))
    if detok.enabled:
        stages.append(Stage(DetokenizeUDF, {"model": detok.model_source, "trust_remote_code": trust},
                            _cpu_stage_kwargs(detok)))
    return stages


def _http_stages(config: C.HttpRequestProcessorConfig) -> list[Stage]:
    stage = C.resolve_stage(config.http_request_stage, C.HttpRequestStageConfig,
                            {"batch_size": config.batch_size, "concurrency": config.concurrency})
    kwargs = _cpu_stage_kwargs(stage)
    kwargs["num_cpus"] = stage.num_cpus or 0  # waits on the network, holds no core
    return [Stage(HttpRequestUDF, {"url": config.url, "headers": config.headers, "qps": config.qps,
                                   "max_retries": config.max_retries,
                                   "base_retry_wait_time_in_s": config.base_retry_wait_time_in_s,
                                   "session_factory": config.session_factory}, kwargs)]
