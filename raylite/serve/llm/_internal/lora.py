"""Multi-LoRA on one base model: `model="base:adapter"` requests, adapters loaded on first use.

An LLMConfig with `lora_config` serves its base model plus any adapter found under
`dynamic_lora_loading_path` (a local folder or `s3://bucket/prefix`, one sub-folder per adapter,
as peft saves them). A request naming `base:adapter` reaches a replica through Serve's
multiplexing (the ingress sets `multiplexed_model_id`, so requests for one adapter prefer the
replicas that hold it); the replica's `@serve.multiplexed` loader fetches the adapter into a local
folder once and keeps up to `max_num_adapters_per_replica` of them (least recently used out).
The engine gets the adapter with each request (vLLM's LoRARequest: name, a stable int id, path).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Adapter:
    """One loaded adapter of a replica: its name, the engine's int id for it, its local folder."""

    name: str
    int_id: int
    path: str


def split_model_id(model: str) -> tuple[str, str | None]:
    """'base:adapter' -> ('base', 'adapter'); 'base' -> ('base', None)."""
    base, sep, adapter = model.partition(":")
    return (base, adapter or None) if sep else (model, None)


class AdapterFetcher:
    """Copies an adapter's folder from `dynamic_lora_loading_path` to this replica's disk."""

    _ids = itertools.count(1)  # vLLM's lora_int_id: unique per engine, never 0

    def __init__(self, root: str, download_tries: int = 3) -> None:
        self.root = root.rstrip("/")
        self.tries = max(1, download_tries)
        self.local_dir = tempfile.mkdtemp(prefix="raylite-lora-")

    def fetch(self, name: str) -> Adapter:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"LoRA adapter name {name!r} is not a folder name under "
                             f"{self.root}; ask for model='BASE:ADAPTER' with ADAPTER a sub-folder there")
        if "://" not in self.root or self.root.startswith("file://"):
            path = os.path.join(self.root.removeprefix("file://"), name)
            _check_adapter_dir(path, name, self.root)
            return Adapter(name, next(self._ids), path)
        target = os.path.join(self.local_dir, name)
        error: Exception | None = None
        for _ in range(self.tries):
            try:
                self._download(f"{self.root}/{name}", target)
                break
            except FileNotFoundError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried, then reported
                error = exc
        else:
            raise RuntimeError(f"could not download LoRA adapter {name!r} from {self.root}/{name} after "
                               f"{self.tries} tries: {type(error).__name__}: {error}")
        _check_adapter_dir(target, name, self.root)
        return Adapter(name, next(self._ids), target)

    def _download(self, uri: str, target: str) -> None:
        from raylite.util._storage import fsspec_filesystem

        fs, inner = fsspec_filesystem(uri)
        if not fs.exists(inner):
            raise FileNotFoundError(f"LoRA adapter folder {uri} does not exist")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        for remote in fs.find(inner):
            rel = os.path.relpath(remote, inner)
            os.makedirs(os.path.dirname(os.path.join(target, rel)), exist_ok=True)
            fs.get_file(remote, os.path.join(target, rel))

    def forget(self, adapter: Adapter) -> None:
        """Remove a downloaded adapter's files once the replica evicted it."""
        if adapter.path.startswith(self.local_dir):
            shutil.rmtree(adapter.path, ignore_errors=True)


def _check_adapter_dir(path: str, name: str, root: str) -> None:
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise FileNotFoundError(f"LoRA adapter {name!r} not found: {root}/{name} holds no adapter_config.json "
                                "(save the adapter there with peft's save_pretrained)")


def engine_lora_kwargs(engine_kwargs: dict[str, Any], max_adapters: int) -> dict[str, Any]:
    """vLLM's LoRA switches for a replica that may hold `max_adapters` adapters."""
    out = dict(engine_kwargs)
    out.setdefault("enable_lora", True)
    out.setdefault("max_loras", max_adapters)
    out.setdefault("max_cpu_loras", max_adapters)
    return out
