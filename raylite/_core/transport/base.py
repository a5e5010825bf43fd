"""Transport errors and address parsing.

Closed is not Broken: `ConnectionClosedError` means this side closed the
connection; `ConnectionBrokenError` means the peer or the network did.
"""

from __future__ import annotations


class TransportError(Exception):
    """Base of transport failures."""


class ConnectionClosedError(TransportError):
    """This side called close(); using the connection afterwards is a bug here."""


class ConnectionBrokenError(TransportError):
    """The peer or the network failed; the OS error, if any, is in __cause__."""


class HandshakeError(TransportError):
    """The peer refused us (wrong cluster token or protocol version)."""


class RemoteError(Exception):
    """The peer's handler raised while answering our request."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def parse_address(address: str) -> tuple[str, str | tuple[str, int]]:
    """'unix:///path' -> ('unix', path); 'tcp://h:p' or 'h:p' -> ('tcp', (h, p))."""
    if address.startswith("unix://"):
        return "unix", address[len("unix://"):]
    if address.startswith("tcp://"):
        address = address[len("tcp://"):]
    elif address.startswith("raylite://"):
        address = address[len("raylite://"):]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad address {address!r}: expected HOST:PORT or unix:///path")
    return "tcp", (host.strip("[]"), int(port))
