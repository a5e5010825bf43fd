"""What a stranger on the network tries against a listening port, as reusable functions.

Every listener the cluster opens gets the same battery (test_battery.py): no token, a wrong
token, garbage bytes, a 2**40 and a 0xFFFFFFFF length prefix followed by data, a half-sent frame
then silence, a pickle whose unpickling would create a file, many such connections at once
(the listening process's memory and threads must stay flat) while a real client keeps being
served. A listener is described by a `Target`; the attacks only need its address and how its
first frame looks with a given token (`hello`).

    t = Target("head RPC", ("127.0.0.1", 6379), pid, hello=core_hello, served=lambda: ...)
    assert closed_within(attack(t, garbage()), 3.0)
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------ describing a listener


@dataclass
class Target:
    """A listening socket: `address` is (host, port) or a Unix socket path; `pid` the process
    that listens; `hello(token)` the bytes a client sends first; `served()` runs one real,
    authenticated request and returns True when it was answered."""

    name: str
    address: tuple[str, int] | str
    pid: int
    hello: Callable[[bytes], bytes]
    served: Callable[[], bool]
    handshake_timeout_s: float = 5.0
    extra: dict[str, Any] = field(default_factory=dict)


def connect(target: Target, timeout_s: float = 5.0) -> socket.socket:
    if isinstance(target.address, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        s.connect(target.address)
    else:
        s = socket.create_connection(target.address, timeout=timeout_s)
    return s


# ------------------------------------------------------------------ payloads


class _CreatesFile:
    """Unpickling this runs `open(path, 'w')`: proof of code execution if the file appears."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write('owned')",))


def pickle_creating(path: str) -> bytes:
    """A pickle that creates `path` when loaded (as the issue's exploit of the Serve replica)."""
    return pickle.dumps((1, 1, _CreatesFile(path)))


def framed(payload: bytes, fmt: str = "!I") -> bytes:
    """`payload` behind a length prefix (4-byte big-endian by default: raylite's frames)."""
    return struct.pack(fmt, len(payload)) + payload


def garbage(n: int = 512) -> bytes:
    return os.urandom(n)


def huge_prefix(length: int = 0xFFFFFFFF, data_bytes: int = 1 << 20) -> bytes:
    """A length prefix announcing `length` bytes, then `data_bytes` of data: a listener that
    buffers before it checks holds all of it. 2**40 does not fit 4 bytes: it goes as 8."""
    prefix = struct.pack("!I", length) if length <= 0xFFFFFFFF else struct.pack("!Q", length)
    return prefix + b"\0" * data_bytes


def half_frame() -> bytes:
    """A prefix announcing 100 bytes, then only 10 of them: the rest never comes."""
    return struct.pack("!I", 100) + b"x" * 10


# ------------------------------------------------------------------ attacks and observations


def attack(target: Target, data: bytes, *, timeout_s: float = 5.0) -> socket.socket:
    """Connect and send `data` (as much as the peer takes before it closes); returns the socket."""
    s = connect(target, timeout_s)
    with contextlib.suppress(OSError):
        s.sendall(data)
    return s


def closed_within(s: socket.socket, timeout_s: float) -> bool:
    """Read until the peer closes (True) or `timeout_s` passes (False); closes `s`."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return False
            except OSError:  # reset by the peer: closed
                return True
            if not chunk:
                return True
    finally:
        s.close()


def received_before_close(s: socket.socket, timeout_s: float) -> bytes:
    """Everything the peer sends until it closes (or `timeout_s`); closes `s`."""
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except (TimeoutError, OSError):
                break
            if not chunk:
                break
            out += chunk
    finally:
        s.close()
    return bytes(out)


def open_many(target: Target, n: int, data: bytes = b"", send_timeout_s: float = 5.0) -> list[socket.socket]:
    """`n` connections, each sent `data` (as much as the peer takes within `send_timeout_s`)
    and left open; the caller closes them."""
    socks = []
    for _ in range(n):
        try:
            s = connect(target)
        except OSError:
            continue
        if data:
            s.settimeout(send_timeout_s)
            with contextlib.suppress(OSError):
                s.sendall(data)
        socks.append(s)
    return socks


def still_open(socks: list[socket.socket]) -> int:
    """How many of `socks` the peer has not closed (non-blocking peek)."""
    n = 0
    for s in socks:
        try:
            s.setblocking(False)
            chunk = s.recv(1, socket.MSG_PEEK)
            n += bool(chunk)  # data waiting (e.g. a challenge): not closed
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()


def flood_prefix(target: Target, n: int, length: int = 0xFFFFFFFF, data_bytes: int = 1 << 20) -> None:
    """`n` connections in a row, each announcing `length` bytes and sending `data_bytes`;
    all left open until the end, then closed."""
    socks = open_many(target, n, huge_prefix(length, data_bytes))
    close_all(socks)


def refused(target: Target, sock: socket.socket, timeout_s: float | None = None) -> bool:
    """Was what `sock` sent refused? Binary listeners must close the connection (at once, or at
    the handshake deadline when what was sent is shorter than the hello they wait for); an HTTP
    listener (`target.extra["http"]`) must answer 4xx (or close). Closes `sock`."""
    if timeout_s is None:
        timeout_s = target.handshake_timeout_s + 3
    if not target.extra.get("http"):
        return closed_within(sock, timeout_s)
    data = _status_line(sock, timeout_s)
    return data is None or data.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4"))


def _status_line(sock: socket.socket, timeout_s: float) -> bytes | None:
    """The first line of the peer's answer; None if it closed without one."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    try:
        while b"\r\n" not in buf and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                return b"(no answer)"
            except OSError:
                return None
            if not chunk:
                return None if not buf else buf
            buf += chunk
        return buf if buf else b"(no answer)"
    finally:
        sock.close()


# ------------------------------------------------------------------ the listening process


def _status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_bytes(pid: int) -> int:
    return _status(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    return _status(pid, "VmHWM") * 1024


def thread_count(pid: int) -> int:
    return _status(pid, "Threads")


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
