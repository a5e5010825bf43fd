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

from raylite._core import code_pickling

code_pickling.install()  # as Ray's copy does, code pickled by value keeps its file name


def __getattr__(name: str) -> Any:
    """Anything else the cloudpickle package has (`cloudpickle.cloudpickle`, ...)."""
    return getattr(_cloudpickle, name)


__all__ = ["CloudPickler", "Pickler", "__version__", "dump", "dumps", "load", "loads",
           "register_pickle_by_value", "unregister_pickle_by_value"]
