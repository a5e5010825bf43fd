"""runtime_env: merged (job's, then the task's or actor's on top), checked, and shipped.

A local working_dir or py_modules entry is packaged and uploaded to the cluster's store once
and replaced by its package URI; a worker_process_setup_hook callable is pickled there once.
Before init() there is no cluster: local paths stay as they are until init() merges the job's
runtime_env again. Used by init() (the job's runtime_env) and by every task and actor call.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import cloudpickle

from raylite._core.runtime_env import check as runtime_env_check
from raylite._core.runtime_env import packaging

_shipped: dict[tuple, str] = {}  # (path, excludes, cluster) -> package URI, uploaded once


def _ship_py_module(entry: Any) -> str:
    """A py_modules entry (package dir, .py file, .zip, module object or URI) -> package URI."""
    if isinstance(entry, str) and packaging.is_package_uri(entry):
        return entry
    if hasattr(entry, "__file__"):  # a module object: its package folder, or its file
        path = entry.__file__ or ""
        entry = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
    path = os.path.abspath(os.fspath(entry))
    if not os.path.exists(path):
        raise ValueError(f"runtime_env py_modules entry {entry!r} does not exist. Pass a local package "
                         "directory, a .py file, a .zip file or an imported module.")
    return _ship(path, [], kind="py_module")


_shipped_hooks: dict[tuple, str] = {}  # (hook, cluster) -> hook URI, uploaded once


def _ship_setup_hook(hook: Any) -> Any:
    """runtime_env worker_process_setup_hook: a callable is pickled into the cluster's store once
    (workers load it by URI); a "module.function" string is kept, workers import it."""
    from raylite._core import runtime

    if isinstance(hook, str):
        if hook.startswith(packaging.HOOK_SCHEME) or ("." in hook and not hook.startswith(".")):
            return hook
        raise ValueError(f"runtime_env worker_process_setup_hook {hook!r} is not a 'module.function' "
                         "path; pass a callable or a string such as 'my_pkg.setup_logging'.")
    if not callable(hook):
        raise TypeError("runtime_env worker_process_setup_hook must be a callable or a 'module.function' "
                        f"string, not {type(hook).__name__}.")
    client = runtime.client()
    if client is None:  # before init(): shipped when init() merges the job's runtime_env
        return hook
    key = (hook, client.head_address)
    uri = _shipped_hooks.get(key)
    if uri is None:
        data = cloudpickle.dumps(hook)
        digest = hashlib.sha1(data).hexdigest()
        client.kv_put(packaging.KV_NAMESPACE, ("hook-" + digest).encode(), data, False)
        uri = _shipped_hooks[key] = packaging.HOOK_SCHEME + digest
    return uri


def _ship_working_dir(path: str, excludes: list) -> str:
    return _ship(path, excludes, kind="working_dir")


def _ship(path: str, excludes: list, kind: str) -> str:
    """Upload a local working_dir to the cluster once; later calls reuse its URI.

    Before init() there is no cluster to ship to: the path stays local until init()
    merges the job's runtime_env again.
    """
    from raylite._core import runtime

    client = runtime.client()
    if client is None:
        return path
    key = (path, tuple(excludes), kind, client.head_address)
    uri = _shipped.get(key)
    if uri is None:
        if os.path.isdir(path):
            prefix = os.path.basename(path) if kind == "py_module" else ""
            digest, data = packaging.package_directory(path, excludes, prefix=prefix)
        elif kind == "py_module" and path.endswith(".py"):
            digest, data = packaging.package_module_file(path)
        else:
            digest, data = packaging.package_zip_file(path)
        client.kv_put(packaging.KV_NAMESPACE, digest.encode(), data, False)
        uri = _shipped[key] = packaging.PKG_SCHEME + digest
    return uri


def _check_runtime_env_keys(env: dict) -> None:
    """raylite ships files (working_dir, py_modules) and installs pip/uv packages into a
    per-environment virtualenv; conda and containers it does not do: say so instead of
    silently running without them. The job API checks with the same function."""
    runtime_env_check.check(env)


_NO_RUNTIME_ENV: dict = {}  # shared by every task that has none (a queued task should cost little)


def merge_runtime_env(job_env: dict | None, task_env: dict | None) -> dict:
    if not job_env and not task_env:
        return _NO_RUNTIME_ENV
    if not task_env:
        return job_env  # merged and checked when it became the job's (or the running task's)
    merged = dict(job_env or {})
    for k, v in (task_env or {}).items():
        if k == "env_vars":
            merged["env_vars"] = {**(merged.get("env_vars") or {}), **(v or {})}
        else:
            merged[k] = v
    _check_runtime_env_keys(merged)
    wd = merged.get("working_dir")
    if wd and not packaging.is_package_uri(wd):
        wd = os.fspath(wd)
        if not (os.path.isdir(wd) or (os.path.isfile(wd) and wd.endswith(".zip"))):
            raise ValueError(f"runtime_env working_dir {wd!r} is not a local directory or .zip file. "
                             "Pass an existing directory (it is shipped to every worker).")
        merged["working_dir"] = _ship_working_dir(os.path.abspath(wd), merged.get("excludes") or [])
    if merged.get("py_modules"):
        if not isinstance(merged["py_modules"], (list, tuple)):
            raise TypeError("runtime_env py_modules must be a list of package directories, .py files, "
                            f".zip files or modules, not {type(merged['py_modules']).__name__}")
        merged["py_modules"] = [_ship_py_module(m) for m in merged["py_modules"]]
    if merged.get("worker_process_setup_hook") is not None:
        merged["worker_process_setup_hook"] = _ship_setup_hook(merged["worker_process_setup_hook"])
    return merged
