"""Shared fixtures: one local cluster per test module, and condition waiting."""

from __future__ import annotations

import os
import time

import pytest

# Every cluster the tests start, by init() or `raylite start --head`, serves its HTTP API on a
# free port unless the test picks one: 8265 may be held by anything else on the machine. Tests
# of the default port set RAYLITE_DASHBOARD_PORT themselves.
os.environ.setdefault("RAYLITE_DASHBOARD_PORT", "0")
# A local cluster's zygote preloads the heavy libraries its driver has imported (torch, pandas,
# pyarrow: launch.heavy_modules_in_use), so a user's workers start warm. In one long test
# process that has imported all of them, every later cluster would pay that (19 s against 1 s
# for init and a first task, measured in CI's virtualenv): the suite's clusters preload numpy
# only, and a test that uses torch in its workers imports it there.
os.environ.setdefault("RAYLITE_PRELOAD_MODULES", "numpy")

# Under pytest-xdist (`make test` runs two workers), each worker's clusters live in a temp dir
# of its own: `init(address="auto")` and `raylite status` in one worker never find the other's.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _XDIST_WORKER:
    os.environ["RAYLITE_TEMP_DIR"] = f"{os.environ.get('RAYLITE_TEMP_DIR', '/tmp/raylite')}-{_XDIST_WORKER}"

import raylite  # noqa: E402
from tests.s3_server import s3_cluster, s3_env, s3_server  # noqa: E402, F401 - fixtures for every test


def _share_httpx_default_ssl_context() -> None:
    """httpx builds a fresh SSL context, loading the whole CA bundle (80-100 ms of CPU here), for
    every `httpx.get()` and `httpx.Client()`, even for a plain-HTTP URL; the tests call them in
    polling loops against loopback servers, where this was a fifth of the suite's CPU. The
    default context (no custom CA or client certificate, same certificate env) is built once."""
    try:
        import httpx._transports.default as transport
    except ImportError:
        return
    build = transport.create_ssl_context
    built: dict = {}

    def shared(verify=True, cert=None, trust_env=True):
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in built:
            built[key] = build(verify=verify, cert=cert, trust_env=trust_env)
        return built[key]

    transport.create_ssl_context = shared


_share_httpx_default_ssl_context()


@pytest.fixture(scope="package", autouse=True)
def _no_cluster_left_from_another_package():
    """Each test package (directory) starts without a cluster, whatever ran before it (they run
    in any order under `make test-random`): a test that left its driver connected cannot leak
    into another package's counts, ports or `init()` calls. (Package, not module: tests/state
    shares one cluster between its modules; within a package the `cluster` fixtures start
    from a fresh cluster themselves.)"""
    if raylite.is_initialized():
        raylite.shutdown()
    yield


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU cluster for the module; torn down after it."""
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    yield raylite
    raylite.shutdown()


def wait_for(predicate, timeout_s: float = 30.0, interval_s: float = 0.02, what: str = "condition"):
    """Poll `predicate` until it is truthy; fail the test with `what` after the timeout.

    The timeout only bounds a failure: a condition that holds returns at once, so it is
    generous, for a machine loaded by other work."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def hide_module(monkeypatch, name: str, error: type[ImportError] = ModuleNotFoundError) -> None:
    """Make `import name` (and its submodules) fail for the rest of the test, as on a machine
    without that package: for the tests of the errors that name the pip command."""
    import builtins
    import sys

    real_import = builtins.__import__

    def refuse(module, *args, **kwargs):
        if module == name or module.startswith(name + "."):
            raise error(f"No module named '{name}'")
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    monkeypatch.delitem(sys.modules, name, raising=False)


def process_gone(pid: int) -> bool:
    """The process exited: its pid is free, or it is a zombie its parent has not reaped yet.

    Never raises: a process may exit between any two looks at it (``pid_exists`` true, then
    ``Process(pid)`` raising ``NoSuchProcess``), which made waits on an exit flaky."""
    import psutil

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Under xdist, pytest's temp dirs gain a `popen-gwN/` level, which took some tests' session
    directories past the 107 characters a unix socket path may have: the workers' temp dirs go
    under a short directory of their own (made here, by the controller) instead."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.option.basetemp:
        return
    if getattr(config.option, "numprocesses", None):
        import tempfile

        config.option.basetemp = config._raylite_basetemp = tempfile.mkdtemp(prefix="rlpt", dir="/tmp")


def pytest_sessionfinish(session, exitstatus):
    """The short temp dir made above goes when every test passed (a failure's files stay to read)."""
    made = getattr(session.config, "_raylite_basetemp", None)
    if made and exitstatus == 0:
        import shutil

        shutil.rmtree(made, ignore_errors=True)


# Test files that must never run at the same time as each other on two xdist workers:
# netns-hosts shares one bridge between host sets (a test's `down` takes it away), vLLM engines
# take every core and GBs while they start, and tests/state shares one cluster between modules.
_SERIAL_GROUPS = {
    "netns": ("tests/autoscaler/test_local_provider.py", "tests/client/test_netns.py",
              "tests/cluster/test_netns.py", "tests/kubernetes/", "tests/serve_llm/test_netns_engine.py",
              "tests/train/test_train_netns.py"),
    "vllm": ("tests/serve_llm/", "tests/data_llm/"),
    "state": ("tests/state/",),
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With `--dist loadgroup`, every test gets a group: its file (a module's tests share their
    module-scoped cluster, so they stay on one worker), or one of _SERIAL_GROUPS."""
    if not config.pluginmanager.hasplugin("xdist") or config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = next((name for name, prefixes in _SERIAL_GROUPS.items()
                      if any(path.startswith(p) for p in prefixes)), path)
        item.add_marker(pytest.mark.xdist_group(group))
