"""Transports: one framed-message connection API over Unix sockets and TCP."""
