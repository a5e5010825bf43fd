"""raylite.experimental: Ray's `ray.experimental` names (the cluster key-value store, custom
tensor transports' interface), and `get_channel_security()`, what a library needs to open its
own authenticated channel."""

from raylite.experimental.channel_security import ChannelSecurity, get_channel_security
from raylite.experimental.tensor_transport import (
    CommunicatorMetadata,
    TensorTransportManager,
    TensorTransportMetadata,
    register_tensor_transport,
)

__all__ = ["ChannelSecurity", "CommunicatorMetadata", "TensorTransportManager", "TensorTransportMetadata",
           "get_channel_security", "register_tensor_transport"]
