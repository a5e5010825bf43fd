"""Helpers shared by tests/jobs and tests/state: a local cluster with its HTTP API."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass

import raylite


def free_port() -> int:
    """A port nothing listens on, for a test's server. Drawn at random below the kernel's
    ephemeral range (32768+ here): a port bind(0) hands out is one an outgoing connection of
    any other process may take before the server binds it ("address already in use", seen in
    CI); random, so parallel test workers rarely draw the same one."""
    import random

    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that range is crowded: fall back to the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Api:
    url: str
    token: str
    session_dir: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self):
        import httpx

        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)

    def env(self) -> dict[str, str]:
        """Environment for a CLI subprocess talking to this cluster."""
        env = dict(os.environ)
        env["RAY_ADDRESS"] = self.url
        env["RAYLITE_TOKEN"] = self.token
        env.pop("RAYLITE_ADDRESS", None)
        return env

    def here(self, *args: str, check: bool = False) -> CliResult:
        return run_cli_here(self, *args, check=check)

    def cli(self, *args: str, timeout: float = 120, check: bool = False, input: str | None = None):
        r = subprocess.run([sys.executable, "-m", "raylite.cli", *args], capture_output=True, text=True,
                           timeout=timeout, env=self.env(), input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"raylite {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli_here(api: Api, *args: str, check: bool = False) -> CliResult:
    """The `raylite` CLI in this process (click's runner): the same code as `api.cli`, without
    a new interpreter per call. Tests call `api.cli` (a real subprocess) once per command family."""
    from click.testing import CliRunner

    from raylite.cli import main

    result = CliRunner(env={"RAY_ADDRESS": api.url, "RAYLITE_TOKEN": api.token, "RAYLITE_ADDRESS": None}).invoke(
        main, list(args), catch_exceptions=False)
    out = CliResult(result.exit_code, result.stdout, result.stderr)
    if check and out.returncode != 0:
        raise AssertionError(f"raylite {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def start_api_cluster(num_cpus: int = 2) -> Api:
    if raylite.is_initialized():
        raylite.shutdown()
    ctx = raylite.init(num_cpus=num_cpus, dashboard_port=free_port())
    session = ctx["session_dir"]
    with open(os.path.join(session, "token")) as f:
        token = f.read().strip()
    return Api("http://" + ctx.dashboard_url.split("/?")[0], token, session)  # no ?token= link
