"""`ray.job_config.JobConfig`: a job's settings passed as `ray.init(job_config=JobConfig(...))`.

raylite honours the parts a Python job has: `runtime_env` (merged under init()'s own
runtime_env), `ray_namespace` (when init() names none), `code_search_path` (directories the
job's workers import from, as Ray adds them to their sys.path), `metadata` (kept on the object),
`default_actor_lifetime`. `jvm_options` exist for Java jobs and are not used.
"""

from __future__ import annotations

from typing import Any

_LIFETIMES = ("detached", "non_detached")


class JobConfig:
    """A job's configuration (Ray's class and parameter names)."""

    def __init__(self, jvm_options: list[str] | None = None, code_search_path: list[str] | None = None,
                 runtime_env: dict | None = None, _client_job: bool = False, metadata: dict | None = None,
                 ray_namespace: str | None = None, default_actor_lifetime: str = "non_detached",
                 _py_driver_sys_path: list[str] | None = None) -> None:
        self.jvm_options = list(jvm_options or [])
        self.code_search_path = list(code_search_path or [])
        if not isinstance(self.code_search_path, list) or not all(isinstance(p, str) for p in self.code_search_path):
            raise TypeError("code_search_path must be a list of directory paths (str).")
        self.metadata = dict(metadata or {})
        self.ray_namespace = ray_namespace
        self._client_job = _client_job
        self._py_driver_sys_path = list(_py_driver_sys_path or [])
        self.runtime_env: dict = {}
        self.set_runtime_env(runtime_env)
        self.default_actor_lifetime = "non_detached"
        self.set_default_actor_lifetime(default_actor_lifetime)

    def set_metadata(self, key: str, value: str) -> None:
        self.metadata[key] = value

    def set_runtime_env(self, runtime_env: dict | None, validate: bool = False) -> None:
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError(f"runtime_env must be a dict, got {type(runtime_env).__name__}.")
        self.runtime_env = dict(runtime_env or {})

    def set_ray_namespace(self, ray_namespace: str) -> None:
        self.ray_namespace = ray_namespace

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        if default_actor_lifetime not in _LIFETIMES:
            raise ValueError(f"Default actor lifetime must be one of {list(_LIFETIMES)}, got "
                             f"{default_actor_lifetime!r}.")
        self.default_actor_lifetime = default_actor_lifetime

    @classmethod
    def from_json(cls, job_config_json: dict) -> JobConfig:
        return cls(**{k: v for k, v in job_config_json.items() if not k.startswith("_")})

    def _to_dict(self) -> dict[str, Any]:
        return {"jvm_options": self.jvm_options, "code_search_path": self.code_search_path,
                "runtime_env": self.runtime_env, "metadata": self.metadata,
                "ray_namespace": self.ray_namespace, "default_actor_lifetime": self.default_actor_lifetime}

    def __repr__(self) -> str:
        return f"JobConfig({self._to_dict()})"


__all__ = ["JobConfig"]
