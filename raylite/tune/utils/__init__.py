"""Ray Tune's `ray.tune.utils` helpers that searchers and user code import."""

from raylite.tune.utils.util import (
    _detect_config_single,
    deep_update,
    flatten_dict,
    merge_dicts,
    unflatten_dict,
    unflatten_list_dict,
    unflattened_lookup,
    validate_warmstart,
)

__all__ = ["deep_update", "flatten_dict", "merge_dicts", "unflatten_dict",
           "unflatten_list_dict", "unflattened_lookup", "validate_warmstart",
           "_detect_config_single"]
