"""`raylite health-check --address HOST:PORT`: does the head at HOST:PORT answer? (exit 0 / 1)

KubeRay's worker pods wait for the head with this command in an init container limited to
200m CPU and 256 MiB (`ray health-check --address <head service>:6379`, looped every 5 s;
ray-operator/controllers/ray/common/pod.go). So it is one blocking socket and one msgpack
frame each way, with no event loop and none of the node's modules:

- with the cluster token (RAY_AUTH_TOKEN, RAYLITE_TOKEN, or the local head's token file) it
  completes the handshake and asks the head's control store for a key: the head is up and
  serving (exit 0);
- a head that refuses the token is up, but this pod could not join it: as Ray's command does,
  that fails (exit 1), with a message saying how to give the pod the token, so a misconfigured
  RayCluster shows why in its init container's log instead of crash-looping its workers.

A protocol version mismatch fails the check unless --skip-version-check is given.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys

import click

_LEN = struct.Struct(">I")
_MAX_REPLY_BYTES = 1 << 20


class HealthCheckFailed(RuntimeError):
    """The head did not answer as a live head does; the message says what happened."""


def _recv_frame(sock: socket.socket) -> bytes:
    head = _recv_exact(sock, 4)
    (length,) = _LEN.unpack(head)
    if length > _MAX_REPLY_BYTES:
        raise HealthCheckFailed(f"the peer sent a {length}-byte frame; this is not a raylite head")
    return _recv_exact(sock, length)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise HealthCheckFailed("the connection was closed before the head answered")
        buf += chunk
    return buf


def check_head(hostport: str, token: str, *, timeout_s: float = 5.0, skip_version_check: bool = False) -> str:
    """Raise HealthCheckFailed unless the head at HOST:PORT answers; return what it said."""
    from raylite._core import protocol as P

    host, _, port = hostport.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except (OSError, ValueError) as e:
        raise HealthCheckFailed(f"cannot connect to the head at {hostport}: {getattr(e, 'strerror', None) or e}") from None
    with contextlib.closing(sock):
        sock = _maybe_tls(sock)
        try:
            hello = P.encode(P.Hello(token, P.PROTOCOL_VERSION, "cli"), 0)
            sock.sendall(_LEN.pack(len(hello)) + hello)
            reply, _ = P.decode(_recv_frame(sock))
            if not isinstance(reply, P.HelloReply):
                raise HealthCheckFailed(f"{hostport} answered {type(reply).__name__}; this is not a raylite head")
            if not reply.ok:
                if "version mismatch" in reply.error:
                    if skip_version_check:
                        return f"head at {hostport} is up (version check skipped: {reply.error})"
                    raise HealthCheckFailed(f"{reply.error} (or pass --skip-version-check)")
                raise HealthCheckFailed(
                    f"the head at {hostport} is up but refused this command's token ({reply.error}). Give "
                    "it the cluster token: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN (KubeRay's authOptions "
                    "mode: token), or RAYLITE_TOKEN")
            req = P.encode(P.KvGet("raylite_health", b""), 1)
            sock.sendall(_LEN.pack(len(req)) + req)
            answer, _ = P.decode(_recv_frame(sock))
        except OSError as e:  # socket.timeout is an OSError
            raise HealthCheckFailed(f"the head at {hostport} did not answer: {e}") from None
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise HealthCheckFailed(f"{hostport} sent something that is not a raylite reply ({e})") from None
        if isinstance(answer, P.ErrorReply):
            raise HealthCheckFailed(f"the head at {hostport} answered with an error: {answer}")
        return f"head at {hostport} is up and serving"


def _maybe_tls(sock: socket.socket) -> socket.socket:
    from raylite._core.config import get_config

    if not get_config().tls_cert_file:
        return sock
    from raylite._core.transport.rpc import tls_contexts

    return tls_contexts()[1].wrap_socket(sock, server_hostname=None)


@click.command("health-check")
@click.option("--address", default="auto", show_default=True, help="HOST:PORT of the head (GCS) to check.")
@click.option("--component", default=None, help="Accepted for Ray compatibility; raylite checks the head.")
@click.option("--skip-version-check", is_flag=True, help="A head of another raylite version counts as up.")
@click.option("--timeout", "timeout_s", type=float, default=5.0, show_default=True,
              help="Seconds to wait for the head's answer.")
def health_check(address: str, component: str | None, skip_version_check: bool, timeout_s: float) -> None:
    """Exit 0 when the head at --address answers, 1 (with the reason) otherwise."""
    from raylite._core.cluster import files as CF
    from raylite._core.config import get_config

    config = get_config()
    try:
        hostport, token = CF.resolve(address, config.temp_dir, config.token)
        said = check_head(hostport, token, timeout_s=timeout_s, skip_version_check=skip_version_check)
    except (HealthCheckFailed, ConnectionError, ValueError) as e:
        click.echo(f"Error: health check failed: {e}", err=True)
        sys.exit(1)
    click.echo(said)
