"""What a library needs to open its own authenticated channel between cluster processes.

Core's links check the cluster token, use TLS where the cluster does, keep Unix sockets in a
directory only the cluster's user can enter, and bound what a stranger can make them buffer.
A library with its own data plane (Serve's proxy <-> replica channel) must do the same, with
the same settings, without reaching into Core: it asks for them here.

    from raylite.experimental import get_channel_security
    sec = get_channel_security()          # in a driver, task or actor of a running cluster
    sec.check_token(presented)            # constant-time compare
    sec.server_ssl, sec.client_ssl        # ssl.SSLContext for TCP, or None when TLS is off
    os.path.join(sec.socket_dir, "mine")  # a Unix socket no other user can reach
    owned_dir(path)                       # a cache folder no other user planted or can change

The token grants full control of the cluster: keep it in memory, never log or publish it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raylite._core.config import Config
from raylite._core.private_paths import UnsafeDirectoryError, owned_dir
from raylite._core.transport.handshake import token_matches

__all__ = ["ChannelSecurity", "UnsafeDirectoryError", "get_channel_security", "owned_dir"]

if TYPE_CHECKING:
    import ssl

_DEFAULTS = Config()


@dataclass(frozen=True)
class ChannelSecurity:
    """The cluster's credentials and connection limits, as a channel's two ends need them.

    `token`: the cluster token every peer must prove it knows. `socket_dir`: a directory of
    this node (mode 0700) for Unix sockets. `server_ssl` / `client_ssl`: TLS contexts for TCP
    (mutual: each side presents the cluster certificate), or None when the cluster runs
    without TLS. The limits are the cluster's (RAYLITE_HANDSHAKE_TIMEOUT_S,
    RAYLITE_MAX_PENDING_HANDSHAKES, RAYLITE_MAX_FRAME_BYTES).
    """

    token: bytes
    socket_dir: str
    server_ssl: ssl.SSLContext | None = None
    client_ssl: ssl.SSLContext | None = None
    handshake_timeout_s: float = _DEFAULTS.handshake_timeout_s
    max_pending_handshakes: int = _DEFAULTS.max_pending_handshakes
    max_frame_bytes: int = _DEFAULTS.max_frame_bytes

    def check_token(self, presented: bytes) -> bool:
        """Constant-time comparison with the cluster token (an empty token matches nothing)."""
        return token_matches(presented, self.token)

    def __repr__(self) -> str:  # never print the token
        return (f"ChannelSecurity(socket_dir={self.socket_dir!r}, tls={self.server_ssl is not None}, "
                f"handshake_timeout_s={self.handshake_timeout_s}, max_pending_handshakes="
                f"{self.max_pending_handshakes}, max_frame_bytes={self.max_frame_bytes})")


def get_channel_security() -> ChannelSecurity:
    """This process's view of the cluster's channel settings; raylite must be initialized
    (a driver after `raylite.init()`, or any task or actor)."""
    from raylite._core import runtime
    from raylite._core.cluster.files import private_dir
    from raylite._core.config import get_config
    from raylite._core.transport.rpc import tls_contexts

    client = runtime.client()
    if client is None:
        raise RuntimeError("get_channel_security() needs a running raylite: call raylite.init() first "
                           "(inside tasks and actors it is always available)")
    cfg = get_config()
    server_ssl, client_ssl = tls_contexts()
    return ChannelSecurity(
        token=client.token.encode(),
        socket_dir=private_dir(os.path.join(client.session_dir, "sockets")),
        server_ssl=server_ssl, client_ssl=client_ssl,
        handshake_timeout_s=cfg.handshake_timeout_s,
        max_pending_handshakes=cfg.max_pending_handshakes,
        max_frame_bytes=cfg.max_frame_bytes)
