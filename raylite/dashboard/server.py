"""Entry point of the API server process (`python -m raylite.dashboard.server`).

Started by the head's daemon (raylite/_core/head/dashboard_process.py) on the first connection
to the port it bound; it inherits that socket (--fd) and serves it with uvicorn until the
daemon stops it or dies (parent-death signal, and a check of the parent pid).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raylite-dashboard")
    p.add_argument("--fd", type=int, required=True, help="the listening socket, bound by the head")
    p.add_argument("--head-address", required=True)
    p.add_argument("--session-dir", required=True)
    p.add_argument("--node-id", default="")
    p.add_argument("--url", default="")
    p.add_argument("--cluster-address", default="", help="what a job's driver joins (the head's TCP address)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the daemon died before the signal was armed
        return
    args = parse(sys.argv[1:] if argv is None else argv)
    import uvicorn

    from raylite._core.transport.gate import raise_open_file_limit

    raise_open_file_limit()  # as every daemon: a burst of connections must not run it out of descriptors

    from raylite._core.config import env_token, get_config
    from raylite._core.head.dashboard_process import is_loopback
    from raylite.dashboard import http_guard
    from raylite.dashboard.app import build_app
    from raylite.dashboard.context import DashboardContext, HeadClient

    config = get_config()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = env_token()
    sock = socket.socket(fileno=args.fd)
    host = sock.getsockname()[0]
    ctx = DashboardContext(HeadClient(args.head_address, token), config, args.session_dir, token,
                           args.node_id, args.url, cluster_address=args.cluster_address or args.head_address)
    allow_loopback = config.dashboard_loopback_without_token and is_loopback(host)
    app = build_app(ctx, allow_loopback=allow_loopback)
    http_guard.configure(config.handshake_timeout_s, config.max_pending_handshakes)
    ucfg = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False,
                          ws="websockets-sansio", timeout_graceful_shutdown=2,
                          http=http_guard.GuardedH11Protocol, h11_max_incomplete_event_size=http_guard.HEAD_MAX_BYTES)
    server = uvicorn.Server(ucfg)

    async def watch_parent() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        server.should_exit = True

    async def run() -> None:
        watcher = asyncio.get_running_loop().create_task(watch_parent())
        try:
            await server.serve(sockets=[sock])
        finally:
            watcher.cancel()

    try:
        import uvloop  # type: ignore

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())


if __name__ == "__main__":
    main()
