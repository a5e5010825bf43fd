"""One check of a runtime_env's form, shared by every door a runtime_env comes in by.

The Core API (init(), .options(), @remote) and the job API (`POST /api/jobs/`, `raylite job
submit`) accept the same runtime_env, so they refuse the same mistakes with the same words:
an unknown or unsupported field, a malformed pip/uv spec, env_vars that are not strings.
Only the form is checked here (no files are read, nothing is installed): what a field points
at is checked where it is used.
"""

from __future__ import annotations

from typing import Any

from raylite._core.runtime_env import pip_env

KNOWN_KEYS = frozenset({"env_vars", "working_dir", "py_modules", "excludes", "pip", "uv", "config",
                        "eager_install", "worker_process_setup_hook"})
UNSUPPORTED_KEYS = frozenset({"conda", "container", "image_uri", "java_jars", "nsight", "py_executable"})
# Set by raylite itself, never by a user: the driver's script directory and working directory,
# which its job's workers import from (Ray's JobConfig._py_driver_sys_path).
DRIVER_SYS_PATH = "_driver_sys_path"
# JobConfig(default_actor_lifetime="detached"): carried with the job's tasks, so an actor created
# anywhere in the job without a lifetime= gets the job's default (raylite's own field, as above)
DEFAULT_ACTOR_LIFETIME = "_default_actor_lifetime"
PRIVATE_KEYS = frozenset({DRIVER_SYS_PATH, DEFAULT_ACTOR_LIFETIME})


def check(env: Any) -> None:
    """Raise ValueError (TypeError for a wrong type) naming the problem and the fix."""
    if not isinstance(env, dict):
        raise TypeError(f"runtime_env must be a dict, not {type(env).__name__}")
    unsupported = sorted(set(env) & UNSUPPORTED_KEYS)
    if unsupported:
        raise ValueError(f"runtime_env {unsupported} is not supported by raylite: workers run in the "
                         "Python environment the node was started with. Install what the tasks need "
                         "there (on every node), use runtime_env pip / uv for packages, or "
                         "working_dir / py_modules for your own code.")
    unknown = sorted(str(k) for k in set(env) - KNOWN_KEYS - UNSUPPORTED_KEYS - PRIVATE_KEYS)
    if unknown:
        raise ValueError(f"unknown runtime_env field(s) {unknown}; raylite knows {sorted(KNOWN_KEYS)}.")
    for key in ("pip", "uv"):
        if env.get(key):
            pip_env.requirements(env[key])
    env_vars = env.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict):
            raise TypeError(f"runtime_env env_vars must map str to str, not {type(env_vars).__name__}")
        bad = {k: v for k, v in env_vars.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise TypeError(f"runtime_env env_vars must map str to str; these do not: {bad!r}")
    paths = env.get(DRIVER_SYS_PATH)
    if paths is not None and (not isinstance(paths, list) or not all(isinstance(p, str) for p in paths)):
        raise TypeError(f"runtime_env {DRIVER_SYS_PATH} is a list of directories, not {paths!r}")
