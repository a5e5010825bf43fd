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


def test_spilling_switch_maps_to_a_bool_and_refuses_other_values():
    assert system_config_env({"automatic_object_spilling_enabled": False})[0] == {"RAYLITE_OBJECT_SPILLING": "0"}
    assert system_config_env({"automatic_object_spilling_enabled": True})[0] == {"RAYLITE_OBJECT_SPILLING": "1"}
    with pytest.raises(ValueError, match="must be True or False"):
        system_config_env({"automatic_object_spilling_enabled": "no"})


def test_a_full_store_without_spilling_refuses_the_new_object_and_keeps_the_old():
    if ray.is_initialized():
        ray.shutdown()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an honoured key is not "ignored"
        ray.init(num_cpus=1, object_store_memory=75 * 1024 * 1024,
                 _system_config={"automatic_object_spilling_enabled": False})
    try:
        first = ray.put(bytearray(40 * 1024 * 1024))
        with pytest.raises(ray.exceptions.ObjectStoreFullError, match="automatic_object_spilling_enabled"):
            ray.put(bytearray(40 * 1024 * 1024))
        assert len(ray.get(first)) == 40 * 1024 * 1024  # still in memory, not lost or spilled
        del first
        second = ray.put(bytearray(40 * 1024 * 1024))  # the room came back with the first
        assert len(ray.get(second)) == 40 * 1024 * 1024
    finally:
        ray.shutdown()


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


def test_preload_python_modules_are_imported_by_every_worker_and_a_missing_one_is_skipped():
    # Ray's test_preload_workers: modules named in preload_python_modules are imported in the
    # workers before any task (here by the workers' fork template); a name that does not
    # import is skipped, not fatal
    assert system_config_env({"preload_python_modules": ["a.b", "c"]})[0] == {"RAYLITE_PRELOAD_MODULES": "a.b,c"}
    with pytest.raises(ValueError, match="list of module names"):
        system_config_env({"preload_python_modules": "webbrowser"})
    if ray.is_initialized():
        ray.shutdown()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ray.init(num_cpus=1, _system_config={"preload_python_modules": ["webbrowser", "no_such_module_xyz"]})
    try:
        @ray.remote
        def imported():
            import sys

            return "webbrowser" in sys.modules, "no_such_module_xyz" in sys.modules

        assert ray.get(imported.remote(), timeout=60) == (True, False)
    finally:
        ray.shutdown()


def test_unknown_system_config_keys_are_named_in_a_warning():
    if ray.is_initialized():
        ray.shutdown()
    with pytest.warns(UserWarning, match="object_spilling_threshold"):
        ray.init(num_cpus=1, _system_config={"object_spilling_threshold": 0.9})
    ray.shutdown()
