"""The specs of an LLM app under Ray Serve LLM's names: `LLMConfig`, `ModelLoadingConfig`,
`LoraConfig`, `LLMServingArgs`.

These are what the user asked for (pydantic, immutable in spirit, YAML- and dict-friendly);
what a running replica knows lives in the engine and server modules.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

_DEPLOYMENT_FIELDS = {
    "name", "num_replicas", "ray_actor_options", "max_ongoing_requests", "max_queued_requests",
    "autoscaling_config", "user_config", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "logging_config",
    "request_router_config", "placement_group_bundles", "placement_group_strategy",
}
LLM_ENGINES = ("vLLM", "transformers", "auto")


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=True)


class CloudMirrorConfig(_Base):
    """Where weights are mirrored (Ray's name). Only local paths are loaded here."""

    bucket_uri: str | None = None


class ModelLoadingConfig(_Base):
    model_id: str = Field(description="The name clients send as `model`.")
    model_source: str | CloudMirrorConfig | None = Field(
        default=None, description="A Hugging Face id or a local path; defaults to model_id.")
    tokenizer_source: str | None = Field(
        default=None, description="Where the tokenizer is; defaults to model_source.")

    @field_validator("model_id")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model_id must be a non-empty name, e.g. 'my-llama'")
        return value

    def source(self) -> str:
        if isinstance(self.model_source, CloudMirrorConfig):
            raise ValueError("model_source: cloud mirrors are not supported by raylite; give a "
                             "local path or a Hugging Face model id")
        return self.model_source or self.model_id


class LoraConfig(_Base):
    dynamic_lora_loading_path: str | None = None
    max_num_adapters_per_replica: int = Field(default=16, gt=0)
    download_timeout_s: float | None = 30.0
    max_download_tries: int = 3


class LLMConfig(_Base):
    """One model of an OpenAI app: how to load it, which engine runs it, how it is deployed."""

    runtime_env: dict[str, Any] | None = None
    model_loading_config: dict[str, Any] | ModelLoadingConfig
    llm_engine: str = Field(default="vLLM", description="vLLM (fallback: transformers) or "
                            "'transformers' to use the fallback engine on purpose.")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    accelerator_type: str | None = None
    placement_group_config: dict[str, Any] | None = None
    lora_config: dict[str, Any] | LoraConfig | None = None
    deployment_config: dict[str, Any] = Field(default_factory=dict)
    experimental_configs: dict[str, Any] = Field(default_factory=dict)
    log_engine_metrics: bool | None = True

    @field_validator("model_loading_config")
    @classmethod
    def _loading(cls, value: Any) -> ModelLoadingConfig:
        return value if isinstance(value, ModelLoadingConfig) else ModelLoadingConfig(**value)

    @field_validator("lora_config")
    @classmethod
    def _lora(cls, value: Any) -> LoraConfig | None:
        if value is None or isinstance(value, LoraConfig):
            return value
        return LoraConfig(**value)

    @field_validator("llm_engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        for known in LLM_ENGINES:
            if value.lower() == known.lower():
                return known
        raise ValueError(f"llm_engine must be one of {list(LLM_ENGINES)}, got {value!r}")

    @field_validator("deployment_config")
    @classmethod
    def _deployment(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - _DEPLOYMENT_FIELDS)
        if unknown:
            raise ValueError(f"deployment_config has unknown field(s) {unknown}; the supported "
                             f"ones are {sorted(_DEPLOYMENT_FIELDS)}")
        return value

    @field_validator("engine_kwargs")
    @classmethod
    def _parallel_sizes(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            if key in value and (not isinstance(value[key], int) or value[key] < 1):
                raise ValueError(f"engine_kwargs.{key} must be an integer >= 1, got {value[key]!r}")
        return value

    @property
    def model_id(self) -> str:
        return self.model_loading_config.model_id  # type: ignore[union-attr]

    def num_engine_workers(self) -> int:
        """tensor_parallel_size x pipeline_parallel_size: the bundles a replica reserves."""
        return (int(self.engine_kwargs.get("tensor_parallel_size", 1))
                * int(self.engine_kwargs.get("pipeline_parallel_size", 1)))

    def get_serve_options(self, name_prefix: str = "LLMServer:") -> dict[str, Any]:
        """The @serve.deployment options of this model's LLMServer deployment."""
        options = dict(self.deployment_config)
        options.setdefault("name", name_prefix + _safe_name(self.model_id))
        actor = dict(options.get("ray_actor_options") or {})
        if self.runtime_env is not None:
            actor.setdefault("runtime_env", self.runtime_env)
        if self.accelerator_type:
            resources = dict(actor.get("resources") or {})
            resources.setdefault(f"accelerator_type:{self.accelerator_type}", 0.001)
            actor["resources"] = resources
        bundles, strategy = self._placement_bundles()
        if bundles is not None:
            # the replica runs in bundle 0, which must hold what its actor asks for (Ray's
            # rule); its GPUs are the bundles' GPUs, held for the engine (see engine_group)
            actor.pop("num_gpus", None)
            bundles[0] = _fit_replica(bundles[0], actor)
            options["placement_group_bundles"] = bundles
            options["placement_group_strategy"] = strategy
        elif self.accelerator_type:
            actor.setdefault("num_gpus", 1)  # one rank: the replica holds its GPU itself
        if actor:
            options["ray_actor_options"] = actor
        options.setdefault("max_ongoing_requests", 64)
        return options

    def _placement_bundles(self) -> tuple[list[dict[str, float]] | None, str]:
        pg = self.placement_group_config or {}
        strategy = pg.get("strategy", "PACK")
        if "bundles" in pg:
            return [dict(b) for b in pg["bundles"]], strategy
        workers = self.num_engine_workers()
        if "bundle_per_worker" in pg:
            return [dict(pg["bundle_per_worker"]) for _ in range(workers)], strategy
        if workers <= 1:
            return None, strategy
        per_worker: dict[str, float] = {"CPU": 1.0}
        if self.accelerator_type:
            per_worker = {"GPU": 1.0, f"accelerator_type:{self.accelerator_type}": 0.001}
        return [dict(per_worker) for _ in range(workers)], strategy


def _fit_replica(bundle: dict[str, float], actor: dict[str, Any]) -> dict[str, float]:
    """Bundle 0 grown where it lacks what the replica's actor asks for (CPU: num_cpus, default
    1; memory; custom resources): a GPU bundle ({"GPU": 1}) gets the replica's CPU added, a
    CPU bundle that already covers it ({"CPU": 1}) is left as it is."""
    need: dict[str, float] = {"CPU": float(actor.get("num_cpus", 1))}
    if actor.get("memory"):
        need["memory"] = float(actor["memory"])
    for key, value in (actor.get("resources") or {}).items():
        need[key] = float(value)
    out = dict(bundle)
    for key, value in need.items():
        if value and float(out.get(key, 0)) < value:
            out[key] = value
    return out


class LLMServingArgs(_Base):
    """`build_openai_app`'s arguments: the models, and options for the ingress deployment."""

    llm_configs: list[str | dict[str, Any] | LLMConfig]
    ingress_deployment_config: dict[str, Any] = Field(default_factory=dict)

    def parse_llm_configs(self) -> list[LLMConfig]:
        """Configs given as objects, dicts or YAML paths, loaded and validated; ids must be unique."""
        configs = [_load_config(c) for c in self.llm_configs]
        seen: set[str] = set()
        for cfg in configs:
            if cfg.model_id in seen:
                raise ValueError(f"model_id {cfg.model_id!r} is given twice in llm_configs; "
                                 "each model of an app needs its own id")
            seen.add(cfg.model_id)
        if not configs:
            raise ValueError("llm_configs is empty: give at least one LLMConfig")
        return configs


def _load_config(value: str | dict[str, Any] | LLMConfig) -> LLMConfig:
    if isinstance(value, LLMConfig):
        return value
    if isinstance(value, dict):
        return LLMConfig(**value)
    if isinstance(value, str | os.PathLike):
        import yaml

        if not os.path.exists(value):
            raise FileNotFoundError(f"LLM config file {value!r} does not exist")
        with open(value) as f:
            return LLMConfig(**(yaml.safe_load(f) or {}))
    raise TypeError(f"an LLM config must be an LLMConfig, a dict or a YAML path, got {type(value)}")


def _safe_name(model_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model_id)


__all__ = ["CloudMirrorConfig", "LLMConfig", "LLMServingArgs", "LoraConfig", "ModelLoadingConfig"]
