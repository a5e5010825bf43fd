"""When a replica's connection breaks, a request it acknowledged (R_STARTED: it entered user
code) or that was already answering (a stream) fails, and any other is handed back for another
replica (R_LOST: it may have been running, so it is resent with ACK_FIRST)."""

import asyncio
import os
import tempfile

from raylite.experimental import ChannelSecurity
from raylite.serve._internal import wire
from raylite.serve._internal.router import Connection, ConnectionPool
from raylite.serve._internal.wire import KIND_HTTP, R_LOST, R_OK, R_START, R_STARTED, REQ


def test_unacknowledged_requests_come_back_for_a_retry():
    async def main() -> dict:
        path = os.path.join(tempfile.mkdtemp(), "replica.sock")
        token = os.urandom(32)
        got: list = []

        def on_frame(proto, msg):  # a replica that acknowledges the first request and answers it,
            got.append(msg)        # acknowledges the second, starts streaming the fourth (with no
            if len(got) == 4:      # acknowledgement), and dies holding the third
                proto.send((got[0][1], R_STARTED, None, 0))
                proto.send((got[0][1], R_OK, "done", 0))
                proto.send((got[1][1], R_STARTED, None, 0))
                proto.send((got[3][1], R_START, (200, []), 0))
                asyncio.get_running_loop().call_later(0.05, proto.close)

        server = await asyncio.get_running_loop().create_unix_server(
            lambda: wire.ServerProtocol(token, wire.HandshakeGate("test", 8), on_frame), path)
        pool = ConnectionPool("node", ChannelSecurity(token=token, socket_dir=os.path.dirname(path)))
        conn = await pool.get({"replica_id": "r1", "node_id": "node", "unix_path": path})
        outcomes: dict = {}
        lost = asyncio.Event()
        for rid in (1, 2, 3, 4):
            def cb(code, data, qlen, last, rid=rid):
                if last:
                    outcomes[rid] = code
                if len(outcomes) == 4:
                    lost.set()
            conn.pending[rid] = cb
            conn.send((REQ, rid, KIND_HTTP, (), ()))
        await asyncio.wait_for(lost.wait(), 10)
        server.close()
        assert isinstance(conn, Connection) and conn.started == set()
        return outcomes

    outcomes = asyncio.run(main())
    assert outcomes == {1: R_OK, 2: -1, 3: R_LOST, 4: -1}
