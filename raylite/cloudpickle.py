"""`raylite.cloudpickle` (`from ray import cloudpickle` through compat/ray): the cloudpickle
package raylite serializes functions and classes with, under the name Ray re-exports its own
copy by. Test code and libraries call `cloudpickle.dumps/loads` from there."""

from typing import Any

import cloudpickle as _cloudpickle
from cloudpickle import (
    CloudPickler,
    Pickler,
    __version__,
    dump,
    dumps,
    load,
    loads,
    register_pickle_by_value,
    unregister_pickle_by_value,
)


def __getattr__(name: str) -> Any:
    """Anything else the cloudpickle package has (`cloudpickle.cloudpickle`, ...)."""
    return getattr(_cloudpickle, name)


__all__ = ["CloudPickler", "Pickler", "__version__", "dump", "dumps", "load", "loads",
           "register_pickle_by_value", "unregister_pickle_by_value"]
