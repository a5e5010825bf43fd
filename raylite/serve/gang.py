"""`ray.serve.gang`: the context a gang-scheduled replica reads from `serve.get_replica_context()`."""

from raylite.serve.context import GangContext

__all__ = ["GangContext"]
