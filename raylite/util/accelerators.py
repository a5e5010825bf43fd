"""`ray.util.accelerators`: the accelerator type names for `accelerator_type=`
(`NVIDIA_TESLA_V100 == "V100"`, ...), from the compatibility module
raylite/_private/compat_names.py."""

from raylite._private.compat_names import ACCELERATOR_TYPES

globals().update(ACCELERATOR_TYPES)

__all__ = sorted(ACCELERATOR_TYPES)
