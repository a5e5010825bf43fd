"""config.py is the only reader of RAYLITE_*/RAY_* variables: the Config for settings, a few
named functions for where this process stands (read afresh on each call)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from raylite._core import config as C

ROOT = pathlib.Path(__file__).resolve().parents[2] / "raylite"


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _ray_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(("RAYLITE_", "RAY_"))


def _env_reads(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and _ray_name(node.args[0]):
            f = node.func
            if isinstance(f, ast.Attribute) and (
                    (f.attr in ("get", "pop") and _is_environ(f.value)) or f.attr == "getenv"):
                found.append(f"line {node.lineno}: {node.args[0].value}")
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value)
              and _ray_name(node.slice)):
            found.append(f"line {node.lineno}: {node.slice.value}")
    return found


def test_only_config_reads_raylite_and_ray_variables():
    bad = {str(p.relative_to(ROOT.parent)): r for p in ROOT.rglob("*.py")
           if p != ROOT / "_core" / "config.py" and (r := _env_reads(p))}
    assert not bad, f"read these through raylite._core.config (Config or its env_* functions): {bad}"


def test_the_address_is_read_when_asked_in_the_order_given(monkeypatch):
    monkeypatch.delenv("RAYLITE_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert C.env_address() == "10.0.0.1:6379"
    monkeypatch.setenv("RAYLITE_ADDRESS", "10.0.0.2:6379")
    assert C.env_address() == "10.0.0.2:6379"
    assert C.env_address(("RAY_ADDRESS", "RAYLITE_ADDRESS")) == "10.0.0.1:6379"
    with pytest.raises(ValueError, match="not 'HOME'"):
        C.env_address(("HOME",))


def test_the_job_facts_and_the_api_server_address(monkeypatch):
    monkeypatch.setenv("RAYLITE_JOB_SUBMISSION_ID", "raysubmit_1")
    monkeypatch.setenv("RAYLITE_JOB_RUNTIME_ENV", '{"env_vars": {"A": "1"}}')
    monkeypatch.setenv("RAYLITE_ADDRESS", "10.0.0.2:6379")
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    assert C.job_submission_id() == "raysubmit_1"
    assert C.job_runtime_env() == {"env_vars": {"A": "1"}}
    assert C.env_api_server_address() == "http://127.0.0.1:8265"
    monkeypatch.delenv("RAYLITE_JOB_RUNTIME_ENV")
    assert C.job_runtime_env() is None


def test_reload_config_reads_the_environment_again(monkeypatch):
    monkeypatch.setattr(C, "_CONFIG", None)
    monkeypatch.setenv("RAYLITE_SESSIONS_TO_KEEP", "3")
    assert C.get_config().sessions_to_keep == 3
    monkeypatch.setenv("RAYLITE_SESSIONS_TO_KEEP", "4")
    assert C.get_config().sessions_to_keep == 3
    assert C.reload_config().sessions_to_keep == 4 and C.get_config().sessions_to_keep == 4
