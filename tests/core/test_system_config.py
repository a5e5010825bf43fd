"""Ray's `init(_system_config=...)`: the keys raylite honours reach the local node it starts.

Ray's docs set the memory monitor's threshold this way (`ray_oom_prevention.py`); a node that
ignored it would let such an example fill the machine up to the default threshold instead.
"""

from __future__ import annotations

import time
import warnings

import pytest

import raylite as ray
from raylite._core.config import system_config_env


def test_system_config_keys_map_to_the_node_settings():
    env, unknown = system_config_env({"memory_usage_threshold": 0.4, "memory_monitor_refresh_ms": 250,
                                      "object_spilling_threshold": 0.9})
    assert env == {"RAYLITE_MEMORY_USAGE_THRESHOLD": "0.4", "RAYLITE_MEMORY_MONITOR_INTERVAL_S": "0.25"}
    assert unknown == ["object_spilling_threshold"]


@ray.remote(max_retries=0)
def sleeper():
    time.sleep(20)
    return "survived"


def test_memory_usage_threshold_from_init_reaches_the_memory_monitor():
    if ray.is_initialized():
        ray.shutdown()
    # A threshold below any real use: the monitor takes the running task's worker at once.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # honoured keys are not "ignored"
        ray.init(num_cpus=1, _system_config={"memory_usage_threshold": 0.0001,
                                             "memory_monitor_refresh_ms": 100})
    try:
        with pytest.raises(ray.exceptions.OutOfMemoryError, match="memory monitor"):
            ray.get(sleeper.remote(), timeout=60)
    finally:
        ray.shutdown()


def test_unknown_system_config_keys_are_named_in_a_warning():
    if ray.is_initialized():
        ray.shutdown()
    with pytest.warns(UserWarning, match="object_spilling_threshold"):
        ray.init(num_cpus=1, _system_config={"object_spilling_threshold": 0.9})
    ray.shutdown()
