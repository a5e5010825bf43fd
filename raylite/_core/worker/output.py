"""A worker's stdout and stderr: kept in its own log files and forwarded, line by line, to drivers.

fds 1 and 2 become pipes whose read ends the worker's I/O loop watches: no thread per stream,
because a node may hold thousands of idle actors, and each thread would cost every one of them
about 0.4 MiB and a process id. Each read appends to the worker's log file (kept with the
session after the cluster stops) and sends the complete lines to the node as LogLines, with the
"(name pid=..., ip=...)" prefix of the task running now.

The loop must never block writing into its own pipe: a pipe holds 1 MiB here, and records the
I/O thread logs go straight to the log file and the node instead of through the pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable

from raylite._core import protocol as P

_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class OutputForwarder:
    """Owns the two pipes; `start()` on the main thread, `drain()` before each reply."""

    def __init__(self, loop, io_thread: threading.Thread, send: Callable[[P.Message], None], log_dir: str,
                 name: str, describe: Callable[[], tuple[bytes, str]]) -> None:
        self._loop = loop
        self._io_thread = io_thread
        self._send = send  # runs on the I/O loop
        self._log_dir = log_dir
        self._name = name  # worker-<id>-<pid>
        self._describe = describe  # -> (job id, line prefix) of the task running now
        self._streams: list[_Stream] = []
        self._pollers = threading.local()  # each replying thread's poll of the pipes (drain)

    def start(self) -> None:
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            with contextlib.suppress(OSError):
                fcntl.fcntl(w, _F_SETPIPE_SZ, _PIPE_BYTES)
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            st = _Stream(r, stream, self._open_log(stream))
            self._streams.append(st)
            self._loop.call_soon_threadsafe(self._loop.add_reader, r, self._readable, st)
        _route_io_thread_logging(self)

    def _open_log(self, stream: str) -> int:
        path = os.path.join(self._log_dir, f"{self._name}.{'out' if stream == 'stdout' else 'err'}")
        try:
            os.makedirs(self._log_dir, exist_ok=True)
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:
            return -1

    def _readable(self, st: _Stream) -> None:
        """I/O loop: take what the pipe holds, keep it, forward its complete lines."""
        chunks = []
        while True:
            try:
                data = os.read(st.fd, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                self._loop.remove_reader(st.fd)
                break
            chunks.append(data)
        if chunks:
            self.emit(st, b"".join(chunks))

    def emit(self, st: _Stream, data: bytes) -> None:
        """I/O loop: append `data` to the stream's log file and send its complete lines."""
        if st.log_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(st.log_fd, data)
        st.pending += data
        if b"\n" not in st.pending:
            return
        *lines, st.pending = st.pending.split(b"\n")
        job_id, prefix = self._describe()
        with contextlib.suppress(Exception):
            self._send(P.LogLines(job_id, prefix, st.name, [ln.decode(errors="replace") for ln in lines]))

    def drain(self) -> None:
        """Main thread, before a reply: hand what the task printed to the loop first, so a
        driver that exits right after get() still shows it. Once a pipe is empty the loop has
        read its bytes, and it sends them in that same callback, before it runs our reply."""
        if not self._streams:
            return
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # one poll() of both pipes: a syscall per reply, not one per pipe. A poll object is
        # one thread's (another's concurrent poll() raises): a threaded actor's calls reply
        # from their own threads
        poller = getattr(self._pollers, "poller", None)
        if poller is None:
            poller = self._pollers.poller = select.poll()
            for st in self._streams:
                poller.register(st.fd, select.POLLIN)
        for _ in range(200):  # bounded: a child process may keep writing forever
            # POLLIN alone: a pipe whose write end the task closed reports POLLHUP for good
            if not any(events & select.POLLIN for _, events in poller.poll(0)):
                break
            time.sleep(0.001)

    def stderr_stream(self) -> _Stream | None:
        return self._streams[1] if len(self._streams) > 1 else None


class _Stream:
    __slots__ = ("fd", "name", "log_fd", "pending")

    def __init__(self, fd: int, name: str, log_fd: int) -> None:
        self.fd = fd
        self.name = name
        self.log_fd = log_fd
        self.pending = b""


class _IoThreadSafeStream:
    """Where logging handlers write: from the I/O thread straight to the log file and the node
    (writing into the pipe that thread itself empties could block it for good), from any
    other thread to stderr as before."""

    def __init__(self, forwarder: OutputForwarder, io_thread: threading.Thread, fallback) -> None:
        self._forwarder = forwarder
        self._io_thread = io_thread
        self._fallback = fallback

    def write(self, text: str) -> int:
        st = self._forwarder.stderr_stream()
        if st is not None and threading.current_thread() is self._io_thread:
            self._forwarder.emit(st, text.encode(errors="replace"))
            return len(text)
        return self._fallback.write(text)

    def flush(self) -> None:
        if threading.current_thread() is not self._io_thread:
            with contextlib.suppress(Exception):
                self._fallback.flush()


def _route_io_thread_logging(forwarder: OutputForwarder) -> None:
    io_thread = forwarder._io_thread
    handlers = list(logging.root.handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for h in handlers:
        if isinstance(h, logging.StreamHandler) and getattr(h.stream, "fileno", None) is not None:
            with contextlib.suppress(Exception):
                if h.stream.fileno() in (1, 2):
                    h.setStream(_IoThreadSafeStream(forwarder, io_thread, h.stream))

