"""The HTTP server's link to the Serve REST agent (raylite/serve/_internal/rest_agent.py).

The server is no driver, so Serve is driven by a helper process that is one: started on the
first /api/serve/ request with the cluster's address and token in its environment (never on
its command line), asked one JSON request per line on its stdin, answering one JSON line each
on its stdout. One request at a time (a lock): the agent is single-threaded, and deploys return
at once (the import and rollout run as tasks on the cluster). The agent dies with the server
(parent-death signal, and EOF on stdin); one that died is started again by the next request.
Its stderr goes to <session>/logs/serve_rest_agent.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
from typing import Any

# the agent joins the cluster and imports Serve on its first request; later ones answer fast
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 90.0  # more than a PUT waits for the previous one (rest_agent.BUILD_WAIT_S)
MAX_REPLY_BYTES = 64 * 1024 * 1024


class AgentError(RuntimeError):
    """The agent could not be started or did not answer; the message says which."""


class _AgentGone(Exception):
    """The agent that answered before has exited (it lost the cluster): start another."""


class ServeAgent:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._answered_once = False

    async def _start(self) -> asyncio.subprocess.Process:
        env = dict(os.environ)
        env.update({"RAYLITE_ADDRESS": self.ctx.cluster_address or self.ctx.head.address,
                    "RAYLITE_TOKEN": self.ctx.token, "PYTHONUNBUFFERED": "1"})
        env.pop("RAY_ADDRESS", None)
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in [pkg_root, env.get("PYTHONPATH", "")] if p)
        os.makedirs(self.ctx.logs_dir, exist_ok=True)
        with open(os.path.join(self.ctx.logs_dir, "serve_rest_agent.log"), "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "raylite.serve._internal.rest_agent", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=log, env=env, limit=MAX_REPLY_BYTES,
                preexec_fn=_die_with_parent)
        self._answered_once = False
        return proc

    async def request(self, op: str, **fields: Any) -> dict:
        """{"status": HTTP status, "body" | "error"} from the agent. An agent found dead (it exits
        when it loses the cluster) is replaced once, and the request sent to the new one."""
        async with self._lock:
            try:
                return await self._request_once(op, fields)
            except _AgentGone:
                pass
            try:
                return await self._request_once(op, fields)
            except _AgentGone:
                raise AgentError(f"the Serve REST agent exited twice in a row; see {self._log()}") from None

    async def _request_once(self, op: str, fields: dict) -> dict:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await self._start()
        proc = self._proc
        rid = next(self._ids)
        assert proc.stdin is not None and proc.stdout is not None
        timeout_s = REQUEST_TIMEOUT_S if self._answered_once else START_TIMEOUT_S
        try:
            proc.stdin.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
            await proc.stdin.drain()
        except ConnectionError:
            self._kill()
            raise _AgentGone() from None
        try:
            while True:
                line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
                if not line:
                    if self._answered_once:
                        self._kill()
                        raise _AgentGone()
                    raise AgentError(self._died_message())
                reply = json.loads(line)
                if reply.get("id") == rid:
                    self._answered_once = True
                    return reply
        except (asyncio.TimeoutError, ConnectionError, ValueError) as e:
            self._kill()
            why = f"did not answer within {timeout_s:.0f}s" if isinstance(e, asyncio.TimeoutError) else str(e)
            raise AgentError(f"the Serve REST agent {why}; see {self._log()}") from None

    def _log(self) -> str:
        return os.path.join(self.ctx.logs_dir, "serve_rest_agent.log")

    def _died_message(self) -> str:
        self._proc = None
        tail = ""
        with contextlib.suppress(OSError):
            with open(self._log(), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 2000))
                tail = f.read().decode(errors="replace").strip()
        return f"the Serve REST agent exited (log {self._log()}): {tail[-1500:]}"

    def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc = None

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


def _die_with_parent() -> None:
    import signal

    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, int(signal.SIGTERM), 0, 0, 0)
