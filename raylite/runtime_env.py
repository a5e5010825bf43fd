"""`RuntimeEnv` and `RuntimeEnvConfig`: the typed spellings of a runtime_env, as in Ray.

Ray's documentation writes `from ray.runtime_env import RuntimeEnv` and passes
`RuntimeEnv(env_vars=..., pip=...)` wherever a runtime_env dict goes (`init`, `.options`,
`@remote`, job submission). Both classes are dicts, so everything that takes a runtime_env dict
takes them unchanged; building one checks its fields at once (an unknown or unsupported field
fails where it is written, not at the first task).
"""

from __future__ import annotations

from typing import Any

from raylite._runtime_env import _check_runtime_env_keys


class RuntimeEnvConfig(dict):
    """The `config` field of a runtime_env. raylite installs environments before the workers
    that need them start, so `eager_install` and the timeout are accepted and kept as given."""

    def __init__(self, setup_timeout_seconds: int = 600, eager_install: bool = True,
                 log_files: list[str] | None = None) -> None:
        if not isinstance(setup_timeout_seconds, int) or isinstance(setup_timeout_seconds, bool) \
                or not (setup_timeout_seconds > 0 or setup_timeout_seconds == -1):
            raise ValueError(f"RuntimeEnvConfig setup_timeout_seconds must be a positive int or -1 "
                             f"(no limit), not {setup_timeout_seconds!r}")
        if not isinstance(eager_install, bool):
            raise TypeError(f"RuntimeEnvConfig eager_install must be a bool, not {eager_install!r}")
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install)
        if log_files is not None:
            self["log_files"] = list(log_files)

    def to_dict(self) -> dict:
        return dict(self)


class RuntimeEnv(dict):
    """A runtime_env as keyword arguments: `RuntimeEnv(env_vars={"A": "1"}, pip=["emoji"])` is
    the dict `{"env_vars": {"A": "1"}, "pip": ["emoji"]}` (fields left as None are absent)."""

    def __init__(self, *, py_modules: list | None = None, working_dir: str | None = None,
                 pip: Any = None, conda: Any = None, container: dict | None = None,
                 env_vars: dict[str, str] | None = None, worker_process_setup_hook: Any = None,
                 nsight: Any = None, config: dict | RuntimeEnvConfig | None = None,
                 _validate: bool = True, **kwargs: Any) -> None:
        fields = dict(py_modules=py_modules, working_dir=working_dir, pip=pip, conda=conda,
                      container=container, env_vars=env_vars,
                      worker_process_setup_hook=worker_process_setup_hook, nsight=nsight,
                      config=config, **kwargs)
        super().__init__({k: v for k, v in fields.items() if v is not None})
        if isinstance(self.get("config"), dict) and not isinstance(self["config"], RuntimeEnvConfig):
            self["config"] = RuntimeEnvConfig(**self["config"])
        if _validate:
            _check_runtime_env_keys(self)

    def to_dict(self) -> dict:
        return {k: (dict(v) if isinstance(v, RuntimeEnvConfig) else v) for k, v in self.items()}

    def env_vars(self) -> dict[str, str]:
        return dict(self.get("env_vars") or {})

    def has_working_dir(self) -> bool:
        return self.get("working_dir") is not None

    def working_dir_uri(self) -> str | None:
        return self.get("working_dir")

    def py_modules_uris(self) -> list:
        return list(self.get("py_modules") or [])

    def has_pip(self) -> bool:
        return self.get("pip") is not None

    def has_py_modules(self) -> bool:
        return self.get("py_modules") is not None

    def has_conda(self) -> bool:
        return False  # refused at construction: raylite does not create conda environments

    def plugins(self) -> dict:
        return {k: v for k, v in self.items() if k not in _KNOWN}


_KNOWN = {"py_modules", "working_dir", "pip", "conda", "container", "env_vars",
          "worker_process_setup_hook", "nsight", "config", "uv", "excludes", "eager_install"}
