"""`ray._private.services`: `get_node_ip_address()`, re-exported from the compatibility module
raylite/_private/compat_names.py."""

from raylite._private.compat_names import get_node_ip_address

__all__ = ["get_node_ip_address"]
