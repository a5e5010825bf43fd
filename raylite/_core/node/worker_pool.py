"""Worker processes of one node: forked by the zygote, reused by runtime environment.

The pool is the worker index (worker_index.py: each worker's state and the idle and
starting indexes, no processes) plus the processes: it starts new workers through the
zygote's control socket and kills them. It does no scheduling: the lease table
(lease_table.py) decides who gets which worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections.abc import Callable

from raylite._core.ids import WorkerID
from raylite._core.node import process_tree
from raylite._core.node.worker_index import WorkerIndex, WorkerRecord
from raylite._core.node.zygote import start_zygote
from raylite._core.runtime_env import pip_env
from raylite._core.runtime_env.packaging import digest_of, is_package_uri

log = logging.getLogger("raylite.worker_pool")

WORKER_MODULE = "raylite._core.worker.worker"  # what the zygote's children run (its `main(request)`)


class WorkerPool(WorkerIndex):
    def __init__(self, node_address: str, token: str, session_dir: str,
                 on_exit: Callable[[WorkerRecord], None]) -> None:
        self.node_address = node_address
        self.token = token
        self.session_dir = session_dir
        self.on_exit = on_exit
        super().__init__()
        self._zygote_pid = 0
        self._zygote_sock: socket.socket | None = None
        self._buf = b""

    def fork_zygote(self) -> None:
        """Call before any thread or event loop exists in this process."""
        self._zygote_pid, self._zygote_sock = start_zygote(WORKER_MODULE)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._zygote_sock is not None
        self._zygote_sock.setblocking(False)
        loop.add_reader(self._zygote_sock.fileno(), self._on_zygote_readable)

    def _on_zygote_readable(self) -> None:
        try:
            data = self._zygote_sock.recv(65536)
        except BlockingIOError:
            return
        if not data:
            log.error("the zygote exited; no new workers can start")
            asyncio.get_event_loop().remove_reader(self._zygote_sock.fileno())
            return
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            info = json.loads(line)
            if "started" in info:
                rec = self.workers.get(bytes.fromhex(info["started"]))
                if rec is not None:
                    rec.pid = info["pid"]
                    self.by_pid[rec.pid] = rec
            elif "exited" in info:
                rec = self.by_pid.pop(info["exited"], None)
                if rec is not None:
                    if info["signal"]:
                        try:
                            name = signal.Signals(info["signal"]).name
                        except ValueError:
                            name = str(info["signal"])
                        rec.exit_info = f"killed by signal {name}"
                    else:
                        rec.exit_info = f"exited with code {info['code']}"
                    self.on_exit(rec)

    def start_worker(self, key: str, runtime_env: dict, *, now: float) -> WorkerRecord:
        worker_id = WorkerID.from_random()
        rec = self.add_starting(worker_id, key, now=now)
        env = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        wd = runtime_env.get("working_dir") or ""
        mods = runtime_env.get("py_modules") or []
        request = {
            "worker_id": worker_id.hex(),
            "node_address": self.node_address,
            "token": self.token,
            "session_dir": self.session_dir,
            "env": env,
            "cwd": "" if is_package_uri(wd) else wd,
            "working_dir_pkg": digest_of(wd) if is_package_uri(wd) else "",
            # local py_modules, then the driver's directories (inserted first on sys.path, as Ray does)
            "py_path": [m for m in mods if not is_package_uri(m)] + list(runtime_env.get("_driver_sys_path") or []),
            "py_module_pkgs": [digest_of(m) for m in mods if is_package_uri(m)],
            "pip": pip_env.wanted(runtime_env),  # [tool, spec]: the worker activates that virtualenv
        }
        self._zygote_sock.sendall(json.dumps(request).encode() + b"\n")
        return rec

    def kill(self, rec: WorkerRecord, reason: str = "") -> None:
        self.doom(rec, reason)
        if rec.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.pid, signal.SIGKILL)
        elif rec.conn is not None:
            rec.conn.close()

    def shutdown(self) -> None:
        """Kill the workers, the zygote and every process they started (process_tree.py)."""
        with contextlib.suppress(Exception):
            process_tree.kill_node_processes(process_tree.node_tag(os.getpid()), [self._zygote_pid])
        for rec in list(self.workers.values()):
            if rec.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rec.pid, signal.SIGKILL)
        if self._zygote_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._zygote_pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._zygote_pid, 0)
