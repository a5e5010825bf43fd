"""The zygote: a pre-imported template process that forks workers in milliseconds.

The node daemon forks the zygote before it starts its event loop. The zygote
imports what every worker needs, then serves fork requests (JSON lines over a
socketpair): each child applies the worker's environment and becomes a worker.
The zygote reaps its children and reports their exit status, so the node can
say *how* a worker died (exit code, signal).

The zygote does not know the worker: it is given the worker's entry module by name (as a
process is started with `python -m MODULE`) and each child runs that module's `main(request)`.
So the node daemon, which forks the zygote, never imports the worker role.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys

_LIBC: list = []  # loaded once in the zygote: loading it in each worker costs ~0.4 MiB apiece


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL("libc.so.6", use_errno=True))
    return _LIBC[0]


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        _libc().prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def _limit_malloc_arenas() -> None:
    """One glibc malloc arena: a worker's I/O thread would otherwise get an arena of its own,
    whose first pages every worker pays for again."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            _libc().mallopt(-8, 1)  # M_ARENA_MAX


def start_zygote(worker_module: str) -> tuple[int, socket.socket]:
    """Fork the zygote, whose children run `worker_module.main(request)`; returns (pid, the
    node's end of the control socket)."""
    parent_sock, child_sock = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # zygote
        try:
            parent_sock.close()
            _zygote_main(child_sock, worker_module)
        finally:
            os._exit(0)
    child_sock.close()
    return pid, parent_sock


def _zygote_main(sock: socket.socket, worker_module: str) -> None:
    set_parent_death_signal()
    from raylite._core.node import process_tree

    process_tree.mark_zygote(os.getppid())  # what the workers start ends with the node
    with contextlib.suppress(Exception):
        os.setpgid(0, 0)  # our own process group: Ctrl-C at the driver's terminal is the driver's
    # the imports wait for the first fork request: until then the node daemon and the
    # driver, which start at the same time, have the CPUs to themselves
    preimported = False
    rpipe, wpipe = os.pipe()
    os.set_blocking(wpipe, False)
    signal.set_wakeup_fd(wpipe)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([sock, rpipe], [], [])
        except InterruptedError:
            ready = [rpipe]
        if rpipe in ready:
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(rpipe, 4096)
        _reap(sock)
        if sock in ready:
            data = sock.recv(65536)
            if not data:
                return  # the node is gone
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                if not preimported:
                    _preimport(worker_module)
                    preimported = True
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    os.close(rpipe)
                    os.close(wpipe)
                    sock.close()
                    _become_worker(request, worker_module)
                    os._exit(0)
                _send(sock, {"started": request["worker_id"], "pid": pid})


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if os.WIFSIGNALED(status):
            info = {"exited": pid, "signal": os.WTERMSIG(status), "code": None}
        else:
            info = {"exited": pid, "signal": None, "code": os.WEXITSTATUS(status)}
        _send(sock, info)


def _send(sock: socket.socket, obj: dict) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(json.dumps(obj).encode() + b"\n")


def _preimport(worker_module: str) -> None:
    """Import what workers will need once, here, so each forked worker starts warm.

    `import torch` alone costs seconds on a small machine; paid once in the template
    it costs nothing per worker (pages are shared copy-on-write).
    """
    import gc

    import raylite._core.runtime  # noqa: F401
    from raylite._core.config import get_config

    importlib.import_module(worker_module)

    names = ["uvloop", "numpy", *[m.strip() for m in get_config().preload_modules.split(",") if m.strip()]]
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    # Every object now alive is shared with the workers copy-on-write. Move them out of
    # the collector's reach: a collection in a worker would otherwise write to (and so
    # copy) every page holding one of them. The template itself allocates little after
    # this, so nothing it needs is left uncollectable.
    _limit_malloc_arenas()
    gc.collect()
    gc.freeze()


def _become_worker(request: dict, worker_module: str) -> None:
    set_parent_death_signal()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for key, value in (request.get("env") or {}).items():
        os.environ[key] = value
    cwd = request.get("cwd")
    if cwd:
        os.chdir(cwd)
        sys.path.insert(0, cwd)
    for path in request.get("py_path") or []:
        sys.path.insert(0, path)
    worker = importlib.import_module(worker_module)  # the process's entry point, as `python -m`
    code = 0
    try:
        worker.main(request)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
