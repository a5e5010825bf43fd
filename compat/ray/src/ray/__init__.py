"""raylite under Ray's name: `import ray` and `import ray.<module>` resolve to raylite.

Libraries built on Ray (Modin, Daft, vLLM's executor, Ray's own integrations) say `import ray`
themselves and cannot be asked to change it. This package makes that import run raylite:

- `ray.<module>` IS `raylite.<module>`: an import-system finder maps `ray.X` to `raylite.X` on
  first import (nothing is imported ahead of use), so `ray.data.Dataset is raylite.data.Dataset`
  and `except ray.exceptions.RayTaskError` catches raylite's errors.
- attributes of `ray` itself (`ray.init`, `ray.remote`, `ray.get`, ...) are raylite's, looked up
  on first use; a name raylite has only as a submodule (`ray.types`, `ray._private`) is imported.
- `ray.__version__` is the Ray release raylite's API matches; raylite's own version is
  `ray.__raylite_version__` (and `raylite.__version__`).
- a real Ray installed in the same environment makes this import fail with a message naming both
  (one `ray` silently hiding the other mixes two systems in one process).

It is a separate, opt-in distribution (`pip install ./compat/ray`): raylite itself never installs
a `ray` module. See docs/ecosystem.md.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

__version__ = "2.60.0"  # the Ray release whose API raylite matches (libraries gate features on it)


def _real_ray_installs() -> list[str]:
    """Paths on sys.path that hold a real Ray: its compiled `_raylet` extension in a `ray`
    package directory (this one included, if Ray was unpacked over it), or a `ray` distribution's
    metadata whose version is not this alias's (`...+raylite...`). One directory listing per
    sys.path entry: cheap enough to run on every `import ray`."""
    found = []
    for entry in sys.path:
        directory = entry or os.getcwd()
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if (name.lower().startswith("ray-") and name.endswith((".dist-info", ".egg-info"))
                    and name[4:5].isdigit() and "+raylite" not in name):
                found.append(os.path.join(directory, name))
        if "ray" in names:
            package = os.path.join(directory, "ray")
            try:
                inside = os.listdir(package)
            except OSError:
                continue
            found.extend(os.path.join(package, n) for n in inside
                         if n.startswith("_raylet.") and n.endswith((".so", ".pyd")))
    return found


def _refuse_to_shadow_a_real_ray() -> None:
    real = _real_ray_installs()
    if real:
        raise ImportError(
            f"raylite's `ray` alias ({os.path.dirname(__file__)}) will not load: a real Ray is "
            f"installed in the same environment ({', '.join(real)}). Both provide the top-level "
            "`ray` module, so one would silently hide the other and libraries would mix them.\n"
            "Fix: keep one of the two. To use Ray, uninstall the alias (`python -m pip uninstall "
            "ray` until `pip show ray` shows Ray's own version, without '+raylite'); to use "
            "raylite, uninstall Ray the same way and reinstall the alias (`pip install "
            "<raylite checkout>/compat/ray`); or give each its own virtualenv.")


_refuse_to_shadow_a_real_ray()

import raylite  # noqa: E402  (after the check: a refused import must not start anything)

__raylite_version__ = raylite.__version__
__all__ = list(raylite.__all__)


class _AliasLoader:
    """Loads `ray.X` by importing `raylite.X` and handing back that very module object.

    The import system stamps the module with the alias's spec between `create_module` and
    `exec_module` (and `importlib.util.LazyLoader` swaps its loader too); `exec_module` puts
    raylite's own `__spec__` and `__loader__` back, so `raylite.X` is left as it was."""

    # (a plain class: the import system and LazyLoader need only these two methods, and
    # importlib.abc would cost `import ray` a quarter of a millisecond)
    def __init__(self, real_name: str) -> None:
        self.real_name = real_name
        self._original: tuple[Any, Any] | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(self.real_name)
        self._original = (getattr(module, "__spec__", None), getattr(module, "__loader__", None))
        return module

    def exec_module(self, module: Any) -> None:
        if self._original is not None:
            module.__spec__, module.__loader__ = self._original
        if hasattr(module, "__path__"):
            _alias_loaded_submodules(self.real_name)


def _alias_loaded_submodules(real_package: str, *, skip: str = "") -> None:
    """Register `ray.P.X` for every `raylite.P.X` already imported.

    Why: when the import system loads a submodule it binds it on the parent package
    (`setattr(raylite.util, "placement_group", <module>)`), clobbering a name the package has
    rebound (raylite.util's `placement_group` is the function, as in Ray). A `ray.` name already
    in sys.modules is never loaded again, so the package keeps its own binding; a submodule first
    imported later is bound exactly as `import raylite.P.X` would bind it."""
    prefix = real_package + "."
    for name in [n for n in sys.modules if n.startswith(prefix)]:
        alias = "ray" + name[len("raylite"):]
        if alias != skip and alias not in sys.modules and sys.modules.get(name) is not None:
            sys.modules[alias] = sys.modules[name]


class _AliasFinder:
    """Finds `ray.X` wherever raylite has `raylite.X`; anything else is left to the rest of
    sys.meta_path (and so fails as a missing module)."""

    _raylite_ray_alias = True  # how a re-import of this package recognises an installed finder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("ray."):
            return None
        real_name = "raylite" + fullname[3:]
        parent = real_name.rpartition(".")[0]
        if parent != "raylite":
            _alias_loaded_submodules(parent, skip=fullname)  # siblings imported since the parent
        module = sys.modules.get(real_name)
        if module is not None:
            is_package = hasattr(module, "__path__")
        else:
            try:
                real_spec = importlib.util.find_spec(real_name)
            except (ImportError, ValueError):
                return None
            if real_spec is None:
                return None
            is_package = real_spec.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real_name), is_package=is_package)


if not any(getattr(f, "_raylite_ray_alias", False) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str) -> Any:
    """`ray.<name>`: raylite's attribute, or else raylite's submodule of that name (Ray imports
    `ray._private`, `ray.types`, ... in its `__init__`; here they load on first use)."""
    try:
        value = getattr(raylite, name)
    except AttributeError:
        if name.startswith("__"):
            raise AttributeError(f"module 'ray' has no attribute {name!r}") from None
        try:
            value = importlib.import_module(f"ray.{name}")
        except ModuleNotFoundError as e:
            if e.name not in (f"ray.{name}", f"raylite.{name}"):
                raise  # the module exists but needs something missing: that is the real error
            raise AttributeError(f"module 'ray' has no attribute {name!r} (raylite, which "
                                 f"`ray` resolves to, has no `raylite.{name}`)") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(raylite)))


def _cli_main() -> None:
    """The `ray` command: raylite's CLI. `ray --version` answers in Ray's format, naming raylite."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        print(f"ray, version {__version__} (raylite {raylite.__version__})")
        return
    from raylite.cli import main

    main(prog_name="ray")
