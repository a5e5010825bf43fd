"""The direct proxy/handle <-> replica channel: pipelined, length-prefixed pickle frames.

Why: a Core actor call costs several messages and a scheduler hop; Serve's hot path must be ONE
message each way. Every replica listens on a Unix socket (same node) and a TCP port (other
nodes) and advertises both to the controller; routers keep one persistent connection per
replica and pipeline requests over it, matching replies by request id.

Frames (tuples, pickled):
  client -> replica   (REQ, rid, kind, meta, payload)   kind: KIND_HTTP | KIND_CALL | KIND_WS
                      (CANCEL, rid)
                      (MSG, rid, item)   a later message of a running request (KIND_WS: see ws_session.py)
  replica -> client   (rid, code, payload, queue_len)    code: R_* below (R_STARTED: payload None)
`queue_len` piggybacks the replica's ongoing-request count on every reply, so routers keep a
fresh cached queue length without probing.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import Callable
from typing import Any

REQ = 0
CANCEL = 1
MSG = 2

KIND_HTTP = 0
KIND_CALL = 1
KIND_WS = 2       # a WebSocket: ASGI websocket messages both ways until one side closes

R_OK = 0          # payload: cloudpickled result (call) or (status, headers, body) (http)
R_ERR = 1         # payload: cloudpickled exception
R_START = 2       # http: (status, headers); a body stream follows
R_CHUNK = 3       # http body chunk (bytes) / pickled generator item
R_END = 4         # end of a stream
R_REJECT = 5      # replica is shutting down: retry elsewhere
R_STARTED = 6     # the request is about to enter user code (on the wire before it does): if the
                  # replica dies, requests without it are retried elsewhere (see replica._start)
R_CREDIT = 7      # ws: the app consumed this many of the client's messages (flow control)

_LEN = struct.Struct("!I")
_DUMPS = pickle.dumps
_LOADS = pickle.loads
_HIGHEST = pickle.HIGHEST_PROTOCOL


def encode(obj: Any) -> bytes:
    data = _DUMPS(obj, _HIGHEST)
    return _LEN.pack(len(data)) + data


class FrameProtocol(asyncio.Protocol):
    """Splits the byte stream into frames and hands each decoded tuple to `on_frame`."""

    def __init__(self, on_frame: Callable[[FrameProtocol, Any], None],
                 on_lost: Callable[[FrameProtocol, BaseException | None], None] | None = None) -> None:
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self.closed = False
        self._out: list[bytes] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                import socket

                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if not buf and len(data) >= 4:
            # fast path: whole frames in this chunk, no copying into the buffer
            pos, end = 0, len(data)
            while end - pos >= 4:
                (n,) = _LEN.unpack_from(data, pos)
                if end - pos - 4 < n:
                    break
                self.on_frame(self, _LOADS(data[pos + 4:pos + 4 + n]))
                pos += 4 + n
            if pos < end:
                buf += data[pos:]
            return
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            self.on_frame(self, _LOADS(bytes(buf[pos + 4:pos + 4 + n])))
            pos += 4 + n
        if pos:
            del buf[:pos]

    def send(self, obj: Any) -> None:
        """Queue a frame; all frames queued in one loop iteration leave in one write.

        Why: on a busy machine every socket write can wake (and yield the core to) the peer;
        one write per iteration instead of one per request cut the proxy's CPU per request.
        """
        if self.transport is None or self.closed:
            return
        data = _DUMPS(obj, _HIGHEST)
        out = self._out
        if not out:
            self._loop.call_soon(self._flush)
        out.append(_LEN.pack(len(data)))
        out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost(self, exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
