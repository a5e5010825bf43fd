"""`import ray` through compat/ray is raylite: the same module and class objects, Ray's version,
lazy loading, the import-system corners libraries use, and pickles that name `ray.` modules."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pickle
import re
import sys

import pytest
from packaging.version import Version

import raylite

from .conftest import REPO, requires_alias, run_python

pytestmark = requires_alias


def test_modules_and_classes_are_raylites_own(ray_alias):
    import ray.data
    import ray.exceptions
    import ray.train.torch
    import ray.util.state
    from ray import serve
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    import raylite.train.torch
    import raylite.util.state

    assert ray.data is raylite.data and ray.data.Dataset is raylite.data.Dataset
    assert ray.exceptions.RayTaskError is raylite.exceptions.RayTaskError
    assert ray.train.torch is raylite.train.torch and serve is raylite.serve
    assert placement_group is raylite.util.placement_group
    assert PlacementGroupSchedulingStrategy is raylite.util.scheduling_strategies.PlacementGroupSchedulingStrategy
    assert ray.util.state is raylite.util.state
    for name in ("init", "remote", "get", "put", "wait", "shutdown", "get_actor", "ObjectRef", "method"):
        assert getattr(ray_alias, name) is getattr(raylite, name), name


def test_serve_llm_through_the_ray_name(ray_alias):
    pytest.importorskip("transformers", reason="raylite.serve.llm needs the llm extra")
    import ray.serve.llm

    import raylite.serve.llm

    assert ray.serve.llm is raylite.serve.llm and ray.serve.llm.LLMConfig is raylite.serve.llm.LLMConfig


def test_exceptions_raised_by_raylite_are_caught_under_ray_names(ray_alias, cluster):
    import ray.exceptions

    @raylite.remote
    def fail():
        raise KeyError("k")

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray_alias.get(fail.remote())
    assert isinstance(info.value, KeyError)
    with pytest.raises(ray.exceptions.GetTimeoutError):

        @raylite.remote
        def slow():
            import time

            time.sleep(30)

        ray_alias.get(slow.remote(), timeout=0.05)


def test_versions_ray_and_metadata(ray_alias):
    assert ray_alias.__version__ == "2.60.0"
    assert raylite.__version__ != ray_alias.__version__ and ray_alias.__raylite_version__ == raylite.__version__
    meta = importlib.metadata.version("ray")
    assert meta == f"2.60.0+raylite.{raylite.__version__}"
    # what vLLM checks before using Ray's compiled graphs (ray_executor.py), and a library's
    # `ray>=2.9` requirement: the local label compares as the release
    assert Version(meta) >= Version("2.43.0") and Version(meta).release == (2, 60, 0)


def test_the_distribution_follows_raylites_version():
    """compat/ray's version label and its raylite pin name the raylite of this checkout."""
    with open(os.path.join(REPO, "compat", "ray", "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()  # (tomllib is 3.11+; raylite runs on 3.10)
    assert re.search(r'^version = "(.*)"$', text, re.M).group(1) == f"2.60.0+raylite.{raylite.__version__}"
    assert re.search(r'^dependencies = \["raylite==(.*)"\]$', text, re.M).group(1) == raylite.__version__


def test_import_ray_loads_no_library_ahead_of_use():
    out = run_python("import sys, ray\n"
                     "print(sorted(m for m in ('raylite.data', 'raylite.train', 'raylite.serve', "
                     "'raylite.util', 'raylite.api', 'torch', 'pyarrow') if m in sys.modules))\n"
                     "print(ray.__version__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "2.60.0"]


def test_import_module_of_deep_paths(ray_alias):
    for name in ("ray.util.state", "ray.util.scheduling_strategies", "ray.train.torch", "ray._private.worker",
                 "ray.job_submission", "ray.dag", "ray.data.preprocessors", "ray.cloudpickle", "ray.types"):
        module = importlib.import_module(name)
        assert module is importlib.import_module("raylite" + name[3:]), name
        assert sys.modules[name] is module


def test_names_raylite_lacks_fail_as_on_an_incomplete_ray(ray_alias):
    with pytest.raises(ModuleNotFoundError, match="ray.rllib"):
        import ray.rllib  # noqa: F401
    with pytest.raises(AttributeError, match="nothing_here"):
        ray_alias.nothing_here  # noqa: B018
    assert not hasattr(ray_alias, "__nonexistent_dunder__")


def test_importing_a_submodule_keeps_the_name_its_package_rebound(ray_alias):
    """raylite.util binds `placement_group` to the function (as Ray does), over the submodule of
    that name; importing `ray.util.placement_group` must not rebind it to the module."""
    import ray.cli.ray_start_flags  # noqa: F401  (raylite.cli rebinds `ray_start_flags` too)
    import ray.util.placement_group  # noqa: F401

    import raylite.cli
    import raylite.util

    assert callable(raylite.util.placement_group) and not isinstance(raylite.util.placement_group, type(sys))
    assert raylite.util.placement_group.__name__ == "placement_group"
    assert not isinstance(raylite.cli.ray_start_flags, type(sys))


@pytest.mark.slow  # imports every module (torch, vLLM, transformers, TensorFlow...): 80 s here
def test_every_submodule_import_leaves_raylites_bindings_alone():
    """Import every raylite module by its `ray.` name, in a fresh interpreter: no attribute of any
    raylite package changes (the import system binds each loaded submodule on its parent)."""
    code = r'''
import importlib, pkgutil, sys, types
import raylite
names = [m.name for m in pkgutil.walk_packages(raylite.__path__, "raylite.")
         if not m.name.endswith("__main__")]
loaded = []
for name in names:
    try:
        importlib.import_module(name)
        loaded.append(name)
    except Exception:
        pass  # needs an extra not installed here
before = {n: dict(vars(sys.modules[n])) for n in loaded if hasattr(sys.modules[n], "__path__")}
import ray
for name in loaded:
    assert importlib.import_module("ray" + name[7:]) is sys.modules[name], name
changed = [(n, k) for n, d in before.items() for k, v in d.items() if vars(sys.modules[n]).get(k) is not v]
print(len(loaded), changed)
'''
    out = run_python(code, timeout_s=300)
    assert out.returncode == 0, out.stderr[-3000:]
    count, changed = out.stdout.strip().split(" ", 1)
    assert int(count) > 100 and changed == "[]", out.stdout


@pytest.mark.slow  # two interpreters importing every module (torch, vLLM, ...): ~30 s here
def test_importing_by_ray_names_first_binds_what_raylite_names_bind():
    """The other order: every module imported by its `ray.` name first, each package aliased
    before its submodules load. Each raylite package ends with the same kinds of bindings as
    in an interpreter that imported the same modules by their raylite names."""
    walk = r'''
import importlib, pkgutil, sys
import raylite
prefix = sys.argv[1]
names = [m.name for m in pkgutil.walk_packages(raylite.__path__, "raylite.")
         if not m.name.endswith("__main__")]
if prefix == "ray":
    import ray
for name in names:
    try:
        importlib.import_module(prefix + name[7:])
    except Exception:
        pass
kinds = {n: {k: type(v).__name__ for k, v in vars(m).items() if not k.startswith("__")}
         for n, m in sorted(sys.modules.items()) if n.startswith("raylite") and hasattr(m, "__path__")}
print(repr(kinds))
'''
    results = []
    for prefix in ("raylite", "ray"):
        out = run_python(f"import sys; sys.argv[1:] = [{prefix!r}]\n" + walk, timeout_s=300)
        assert out.returncode == 0, out.stderr[-3000:]
        results.append(eval(out.stdout))  # noqa: S307 - our own repr of str -> str dicts
    by_raylite, by_ray = results
    assert by_ray == by_raylite


LAZY_RECIPE = r'''
import importlib.util, sys

def lazy_import(name):  # the recipe in the importlib documentation
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
'''


def test_lazy_loader_recipe():
    code = LAZY_RECIPE + r'''
ray = lazy_import("ray")
print("raylite" in sys.modules)          # nothing ran yet
print(ray.__version__)                    # first use runs it
import raylite
print(ray.init is raylite.init)
state = lazy_import("ray.util.state")
print(state.list_actors is sys.modules["raylite.util.state"].list_actors)
import raylite.util.state as real
print(real.__spec__.name, type(real.__loader__).__name__, type(real).__name__)
print(sys.modules["ray.util.state"] is real)
'''
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False", "2.60.0", "True", "True",
                                       "raylite.util.state SourceFileLoader module", "True"]


def test_cloudpickle_is_reexported(ray_alias):
    import cloudpickle
    from ray import cloudpickle as from_ray

    from raylite import cloudpickle as from_raylite

    assert from_ray is from_raylite
    assert from_raylite.dumps is cloudpickle.dumps and from_raylite.CloudPickler is cloudpickle.CloudPickler
    assert from_raylite.loads(from_raylite.dumps(lambda x: x + 1))(1) == 2
    assert from_raylite.cloudpickle is cloudpickle.cloudpickle  # the rest of the package, forwarded


def test_pickles_naming_ray_modules_load_in_a_worker(ray_alias, cluster):
    """A pickle made by code that names Ray's modules (`ray.exceptions.GetTimeoutError`, as a
    pickle written on Ray would) loads in a worker; a task whose code says `import ray` runs there."""
    made_under_ray_names = b"cray.exceptions\nGetTimeoutError\np0\n."  # protocol 0: GLOBAL by name

    @ray_alias.remote
    def load(blob):
        import pickle

        import ray

        import raylite.exceptions

        cls = pickle.loads(blob)
        return cls is raylite.exceptions.GetTimeoutError, ray.__version__, ray.get_runtime_context().worker.mode

    assert ray_alias.get(load.remote(made_under_ray_names)) == (True, "2.60.0", 1)
    assert pickle.loads(made_under_ray_names) is raylite.exceptions.GetTimeoutError


def test_an_error_class_defined_on_ray_names_crosses_a_worker(ray_alias, cluster):
    import ray.exceptions

    class StoreDown(ray.exceptions.RayError):
        pass

    @ray_alias.remote
    def fail():
        raise StoreDown("down")

    with pytest.raises(raylite.exceptions.RayError) as info:
        ray_alias.get(fail.remote())
    assert isinstance(info.value, StoreDown) and "down" in str(info.value)
