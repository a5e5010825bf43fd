"""Stand-ins for the helpers Ray's own test modules import from Ray's test-only modules.

Ray's test files (run unmodified by bench/conformance_tests.py) import helpers such as
`ray._private.test_utils.wait_for_pid_to_exit` or `ray.tests.conftest.call_ray_start_context`
(the common ones, `ray._common.test_utils.SignalActor` and the like, both Ray 2.60 and raylite
ship, and the harness uses theirs). Those are
Ray's test scaffolding, not API a Ray user programs against, and the Ray wheel does not even ship
`ray.tests`. This module writes each helper again, in the harness's own words and against the
public `ray` API only, so that the same helper runs on Ray 2.60 and on raylite. `install()`
registers a helper only where the running `ray` lacks the name: on Ray 2.60 Ray's own helpers
are used wherever they exist.

Helpers that only make sense against Ray's private internals (GCS protobufs, the Ray Client's
server helpers, DeferSigint) are registered as `_Private` placeholders: the module still imports
(so the rest of the file is collected) and a test that really uses one fails, which the runner
reports as a test of Ray's internals.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any


class _Private:
    """Placeholder for a private internal of Ray that the harness does not provide."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Private(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self._name} is one of Ray's private internals; the conformance "
                                  "harness does not provide it")

    def __eq__(self, other: object) -> bool:
        raise NotImplementedError(f"{self._name} is one of Ray's private internals")

    __hash__ = object.__hash__


def _private_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__getattr__ = lambda attr: _Private(f"{name}.{attr}")  # type: ignore[method-assign]
    return module


# ---------------------------------------------------------------- signals and waiting

# SignalActor, Semaphore, wait_for_condition, async_wait_for_condition and run_string_as_driver:
# both Ray 2.60 and raylite have them in `ray._common.test_utils` (the helpers below use those)


def wait_for_pid_to_exit(pid: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"process {pid} still alive after {timeout}s")


# ---------------------------------------------------------------- drivers in subprocesses

def run_string_as_driver_nonblocking(driver_script: str, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(driver_script.encode())
    proc.stdin.close()
    return proc


def client_test_enabled() -> bool:
    return False


# ---------------------------------------------------------------- small utilities

def hex_to_binary(hex_identifier: str) -> bytes:
    return bytes.fromhex(hex_identifier)


def get_or_create_event_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    try:
        return asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


def reset_ray_address() -> None:
    os.environ.pop("RAY_ADDRESS", None)


def invoke_state_api(verify_cb: Callable[[Any], bool], state_api_fn: Callable[..., Any],
                     state_stats_map: dict | None = None, key_suffix: str | None = None,
                     print_result: bool = False, err_msg: str | None = None, **kwargs: Any) -> Any:
    """Call a state API function and assert that `verify_cb` accepts its result."""
    res = state_api_fn(**kwargs)
    assert verify_cb(res), err_msg or f"state API result not accepted: {res!r}"
    return res


def invoke_state_api_n(*args: Any, **kwargs: Any) -> None:
    for _ in range(5):
        invoke_state_api(*args, **kwargs)


def create_remote_signal_actor(ray_module: Any) -> Any:
    from ray._common.test_utils import SignalActor

    return SignalActor


def get_application_url(protocol: Any = "HTTP", app_name: str = "default", use_localhost: bool = True,
                        is_websocket: bool = False, exclude_route_prefix: bool = False,
                        from_proxy_manager: bool = False) -> str:
    """The HTTP address of a Serve application: the proxy's port plus the app's route prefix."""
    from ray import serve

    port = int(os.environ.get("CONFORMANCE_SERVE_PORT", "8000"))
    base = f"http://{'localhost' if use_localhost else '127.0.0.1'}:{port}"
    if exclude_route_prefix:
        return base
    app = serve.status().applications.get(app_name)
    prefix = getattr(app, "route_prefix", None) or "/"
    return base + ("" if prefix == "/" else prefix)


class BatchQueue:
    """ray.util.queue.Queue with get_batch(): a subclass whose actor also serves batches."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("BatchQueue is a Ray test helper over Queue's private actor")


# ---------------------------------------------------------------- registration

_HELPERS: dict[str, dict[str, Any]] = {
    "ray._common": {},
    "ray._common.utils": {"hex_to_binary": hex_to_binary, "get_or_create_event_loop": get_or_create_event_loop,
                          "reset_ray_address": reset_ray_address},
    "ray._private.test_utils": {
        "client_test_enabled": client_test_enabled, "wait_for_pid_to_exit": wait_for_pid_to_exit,
        "run_string_as_driver_nonblocking": run_string_as_driver_nonblocking, "BatchQueue": BatchQueue,
    },
    "ray._private.state_api_test_utils": {"invoke_state_api": invoke_state_api,
                                          "invoke_state_api_n": invoke_state_api_n},
    "ray.tests": {},
    "ray.tests.client_test_utils": {"create_remote_signal_actor": create_remote_signal_actor},
    "ray.serve._private.test_utils": {"get_application_url": get_application_url},
}

_PRIVATE_MODULES = ["ray.core", "ray.core.generated", "ray.core.generated.gcs_pb2", "ray.core.generated.common_pb2",
                    "ray._private.utils", "ray._private.client_mode_hook", "ray._private.internal_api",
                    "ray._private.profiling", "ray._private.async_compat", "ray.util.client",
                    "ray.util.client.ray_client_helpers"]


def _module(name: str, private: bool) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - absent on this side: the harness provides it
        module = _private_module(name) if private else types.ModuleType(name)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules.get(parent) or _module(parent, private), child, module)
        return module


def install(conftest_module: types.ModuleType) -> None:
    """Register every helper the running `ray` lacks; `ray.tests.conftest` is the harness's conftest."""
    from ray._common import test_utils as common  # Ray's and raylite's own

    private = _module("ray._private.test_utils", private=False)
    for attr in ("wait_for_condition", "run_string_as_driver"):  # where older test files import them
        if not hasattr(private, attr):
            setattr(private, attr, getattr(common, attr))
    for name, attrs in _HELPERS.items():
        module = _module(name, private=False)
        for attr, value in attrs.items():
            if not hasattr(module, attr):
                setattr(module, attr, value)
    for name in _PRIVATE_MODULES:
        _module(name, private=True)
    sys.modules.setdefault("ray.tests.conftest", conftest_module)
