"""raylite.experimental: Ray's `ray.experimental` names (the cluster key-value store so far), and
`get_channel_security()`, what a library needs to open its own authenticated channel."""

from raylite.experimental.channel_security import ChannelSecurity, get_channel_security

__all__ = ["ChannelSecurity", "get_channel_security"]
