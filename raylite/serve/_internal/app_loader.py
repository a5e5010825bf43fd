"""Turn an import path (`module:app`, `module.app`, `pkg.mod:builder`) into a Serve Application.

Used by `serve run/deploy/build`. The target may be a bound Application, or an application
builder: a function taking one argument, the args dict (or a pydantic model built from it when
the parameter is annotated with one). Errors name the module or attribute that is missing and
where Python looked.

Code shipping: raylite's workers do not inherit the CLI's `sys.path`, so modules imported from the
application directory (not installed packages) are registered with cloudpickle to be pickled by
value: replicas and the controller unpickle the deployment classes without the files.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

__all__ = ["ImportPathError", "import_attr", "load_application", "parse_builder_args"]


class ImportPathError(ImportError):
    """An import path does not lead to an importable module and attribute."""


def _split(import_path: str) -> tuple[str, str]:
    if ":" in import_path:
        module, _, attr = import_path.partition(":")
    else:
        module, _, attr = import_path.rpartition(".")
    if not module or not attr:
        raise ImportPathError(f"import path {import_path!r} must look like 'module:attribute' (or "
                              "'module.attribute'), e.g. 'serve_config:app'")
    return module, attr


def import_attr(import_path: str, app_dir: str | None = None) -> Any:
    """Import `module` and return `attribute` (dotted attributes allowed), with clear errors."""
    module_name, attr = _split(import_path)
    if app_dir is not None:
        app_dir = os.path.abspath(app_dir)
        if app_dir not in sys.path:
            sys.path.insert(0, app_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.split(".")[: len(e.name.split("."))] == e.name.split("."):
            where = app_dir or os.getcwd()
            raise ImportPathError(
                f"could not import module {module_name!r} from import path {import_path!r}: no module "
                f"named {e.name!r} in {where!r} or on sys.path. Run from the directory that contains "
                f"{module_name.split('.')[0]}.py (or its package), or pass --app-dir DIR.") from e
        raise  # the module exists but one of its own imports is missing: show that error as is
    value: Any = module
    walked = module_name
    for part in attr.split("."):
        if not hasattr(value, part):
            names = sorted(n for n in dir(value) if not n.startswith("_"))
            raise ImportPathError(f"{walked!r} has no attribute {part!r} (import path {import_path!r}); "
                                  f"it defines: {', '.join(names[:20]) or 'nothing public'}")
        value = getattr(value, part)
        walked += f".{part}"
    return value


def parse_builder_args(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`key=value` command-line words -> the builder's args dict (values stay strings, as in Ray)."""
    args: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"application argument {pair!r} must look like key=value")
        args[key] = value
    return args


def _serve_types() -> tuple[type, type]:
    from raylite import serve

    return serve.Application, serve.Deployment


def build_application(target: Any, args: dict[str, Any], import_path: str) -> Any:
    """`target` (an Application or a builder) -> an Application; a builder is called with args."""
    application_cls, deployment_cls = _serve_types()
    if isinstance(target, application_cls):
        if args:
            raise TypeError(f"{import_path!r} is a bound application, so it takes no arguments (got "
                            f"{sorted(args)}). Point the import path at an application builder function "
                            "to pass arguments.")
        return target
    if isinstance(target, deployment_cls):
        raise TypeError(f"{import_path!r} is a deployment, not an application: bind it first, e.g. "
                        f"`app = {getattr(target, 'name', 'MyDeployment')}.bind()`, and point the import "
                        "path at `app`.")
    if not callable(target):
        raise TypeError(f"{import_path!r} is a {type(target).__name__}; it must be an application "
                        "(`Deployment.bind()`) or a builder function returning one.")
    params = list(inspect.signature(target).parameters.values())
    if len(params) > 1:
        raise TypeError(f"application builder {import_path!r} must take exactly one argument (the args "
                        f"dict, or a pydantic model), but takes {len(params)}")
    if not params:
        if args:
            raise TypeError(f"application builder {import_path!r} takes no arguments, got {sorted(args)}")
        app = target()
    else:
        app = target(_coerce_args(params[0], args, import_path))
    if not isinstance(app, application_cls):
        raise TypeError(f"application builder {import_path!r} returned {type(app).__name__}; it must "
                        "return an application (`Deployment.bind(...)`).")
    return app


def _coerce_args(param: inspect.Parameter, args: dict[str, Any], import_path: str) -> Any:
    annotation = param.annotation
    try:
        from pydantic import BaseModel, ValidationError
    except ImportError:  # pragma: no cover - pydantic ships with serve
        return args
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        try:
            return annotation.model_validate(args)
        except ValidationError as e:
            from raylite.serve.schema import format_validation_error

            raise ValueError(format_validation_error(e, f"arguments of {import_path}")) from None
    return args


def _resolve_annotation(target: Any) -> None:
    """Resolve string annotations (PEP 563) in place so pydantic-typed builders are recognised."""
    try:
        hints = inspect.get_annotations(target, eval_str=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: treat the argument as a dict
        return
    sig = inspect.signature(target)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    try:
        target.__signature__ = sig.replace(parameters=params)
    except (AttributeError, TypeError):
        pass


def _interpreter_dirs() -> tuple[str, ...]:
    """Where this Python's own modules live: the standard library and every site directory
    (of a system Python, a virtualenv, a conda env, the user site). An app started from `/`
    (a container's WORKDIR) or from a folder holding its virtualenv must not count them as its
    own code."""
    import site
    import sysconfig

    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        for scheme_vars in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
                                   "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}):
            try:
                dirs.add(sysconfig.get_path(key, vars=scheme_vars))
            except (KeyError, ValueError):
                pass
    dirs.update(getattr(site, "getsitepackages", list)())
    if getattr(site, "ENABLE_USER_SITE", False):
        dirs.add(site.getusersitepackages())
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


def _installed(path: str, interpreter_dirs: tuple[str, ...]) -> bool:
    return (os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path
            or path.startswith(interpreter_dirs))


def _local_modules(app_dir: str) -> list[str]:
    """Names of the top-level modules imported from `app_dir` (not raylite, not installed packages)."""
    root = os.path.abspath(app_dir).rstrip(os.sep) + os.sep
    own = _interpreter_dirs()
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or name == "__main__" or name.split(".")[0] == "raylite":
            continue
        path = os.path.abspath(path)
        if path.startswith(root) and not _installed(path, own):
            names.append(name)
    return names


def forget_local_modules(app_dir: str) -> None:
    """Drop the modules imported from `app_dir` so the next import reads the files again."""
    importlib.invalidate_caches()
    for name in _local_modules(app_dir):
        sys.modules.pop(name, None)


def _ship_local_modules(app_dir: str) -> list[str]:
    """Register every imported module whose file lies under `app_dir` to be pickled by value."""
    import cloudpickle

    root = os.path.abspath(app_dir).rstrip(os.sep) + os.sep
    own = _interpreter_dirs()
    # what workers can import on their own: PYTHONPATH (they inherit the environment) and packages
    visible = [os.path.abspath(p) + os.sep for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    shipped = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or name == "__main__" or "." in name or name == "raylite":
            continue
        path = os.path.abspath(path)
        if not path.startswith(root) or _installed(path, own):
            continue
        if any(path.startswith(v) for v in visible):
            continue
        try:
            cloudpickle.register_pickle_by_value(module)
        except ValueError:
            continue
        shipped.append(name)
    return sorted(shipped)


def load_application(import_path: str, args: dict[str, Any] | None = None, app_dir: str | None = ".") -> Any:
    """Import `import_path` (from `app_dir`) and build the Application it names."""
    target = import_attr(import_path, app_dir)
    if inspect.isfunction(target):
        _resolve_annotation(target)
    app = build_application(target, dict(args or {}), import_path)
    _ship_local_modules(app_dir or os.getcwd())
    return app
