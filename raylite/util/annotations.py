"""`raylite.util.annotations`: Ray's API-stability decorators, for libraries that mark their own
APIs with them (`from ray.util.annotations import PublicAPI`).

Each decorator returns the object it was given (except `Deprecated(warning=True)`, below),
after noting the stability in its docstring and tagging it for API linters:

    @PublicAPI                       stable
    @PublicAPI(stability="beta")     "alpha" | "beta" | "stable"; api_group= names its docs group
    @DeveloperAPI  /  @DeveloperAPI()
    @Deprecated    /  @Deprecated(message="use g()", warning=False)

As in Ray, `Deprecated` only documents unless `warning=True`; then calling the function (or
constructing the class, or reading the property) emits a `RayDeprecationWarning`, shown once
per calling module.
"""

from __future__ import annotations

import enum
import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

STABILITY_LEVELS = ("alpha", "beta", "stable")


class AnnotationType(enum.Enum):
    PUBLIC_API = "PublicAPI"
    DEVELOPER_API = "DeveloperAPI"
    DEPRECATED = "Deprecated"
    UNKNOWN = "Unknown"


class RayDeprecationWarning(DeprecationWarning):
    """A deprecated API was used (`@Deprecated(warning=True)`)."""


# DeprecationWarning is hidden outside __main__ by default; these are shown once per module
# that triggers them, unless the user set their own warning options (-W, PYTHONWARNINGS).
if not sys.warnoptions:
    warnings.filterwarnings("module", category=RayDeprecationWarning)


def _decorator(args: tuple, kwargs: dict, make: Callable[..., Callable[[F], F]], name: str) -> Any:
    """Both spellings: `@Name` (the object is the only argument) and `@Name(**options)`."""
    if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], property)):
        return make()(args[0])
    if args:
        raise TypeError(f"@{name} takes keyword options only, e.g. @{name}() or @{name}; got {args!r}")
    return make(**kwargs)


def PublicAPI(*args: Any, **kwargs: Any) -> Any:
    """Mark a public API; `stability` ("alpha", "beta" or "stable", the default) says how
    settled it is, and alpha/beta APIs say so in their docstring."""
    return _decorator(args, kwargs, _public_api, "PublicAPI")


def _public_api(*, stability: str = "stable", api_group: str = "Others") -> Callable[[F], F]:
    if stability not in STABILITY_LEVELS:
        raise ValueError(f"@PublicAPI(stability={stability!r}): stability must be one of "
                         f"{', '.join(map(repr, STABILITY_LEVELS))}.")

    def mark(obj: F) -> F:
        if stability != "stable":
            _append_doc(obj, f"**PublicAPI ({stability}):** This API is in {stability} and may change "
                             "before becoming stable.")
        _mark_annotated(obj, AnnotationType.PUBLIC_API, api_group)
        return obj

    return mark


def DeveloperAPI(*args: Any, **kwargs: Any) -> Any:
    """Mark an API for advanced users and library authors: it may change between minor releases."""
    return _decorator(args, kwargs, _developer_api, "DeveloperAPI")


def _developer_api() -> Callable[[F], F]:
    def mark(obj: F) -> F:
        _append_doc(obj, "**DeveloperAPI:** This API may change across minor Ray releases.")
        _mark_annotated(obj, AnnotationType.DEVELOPER_API)
        return obj

    return mark


def Deprecated(*args: Any, **kwargs: Any) -> Any:
    """Mark a deprecated API; `message` says why and what to use instead. With `warning=True`,
    each use also emits a `RayDeprecationWarning` carrying the message."""
    return _decorator(args, kwargs, _deprecated, "Deprecated")


def _deprecated(*, message: str = "", warning: bool = False, **unknown: Any) -> Callable[[F], F]:
    if unknown:
        raise ValueError(f"@Deprecated got unknown options {sorted(unknown)}: it takes message= and warning=.")
    doc = "**DEPRECATED**: This API is deprecated and may be removed in future Ray releases."
    text = ("This API is deprecated and may be removed in future Ray releases. To silence this "
            'warning, set PYTHONWARNINGS="ignore::DeprecationWarning".')
    if message:
        doc, text = f"{doc}\n{message}", f"{text}\n{message}"

    def mark(obj: F) -> F:
        _append_doc(obj, doc, directive="warning")
        _mark_annotated(obj, AnnotationType.DEPRECATED)
        return _warning_on_use(obj, text) if warning else obj

    return mark


def _warning_on_use(obj: Any, text: str) -> Any:
    """`obj` that warns each time it is used: a class when constructed (patched in place, so
    it stays the same class), a property when read, a function when called."""

    def warn() -> None:
        warnings.warn(text, RayDeprecationWarning, stacklevel=3)  # the user's line, not ours

    if inspect.isclass(obj):
        original = obj.__init__
        plain = original is object.__init__  # object.__init__ refuses the constructor's arguments

        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            warn()
            original(self) if plain else original(self, *args, **kwargs)

        obj.__init__ = __init__
        return obj
    if isinstance(obj, property):
        getter = obj.fget

        def read(self: Any) -> Any:
            warn()
            return getter(self) if getter is not None else None

        return property(functools.wraps(getter)(read) if getter is not None else read,
                        obj.fset, obj.fdel, obj.__doc__)

    @functools.wraps(obj)
    def call(*args: Any, **kwargs: Any) -> Any:
        warn()
        return obj(*args, **kwargs)

    return call


# ---------------------------------------------------------------- docstrings and tags
def _append_doc(obj: Any, message: str, directive: str = "") -> None:
    """Add a paragraph (or an rST `.. directive::` block) at the end of the docstring, at the
    docstring's own indentation so that Sphinx renders it as part of it."""
    doc = (getattr(obj, "__doc__", None) or "").rstrip()
    indent = " " * _doc_indent(doc)
    if directive:
        body = "\n".join(f"{indent}    {line}" for line in message.splitlines())
        addition = f"{indent}.. {directive}::\n\n{body}"
    else:
        addition = "\n".join(f"{indent}{line}" for line in message.splitlines())
    new = f"{doc}\n\n{addition}\n{indent}" if doc else f"{addition}\n{indent}"
    try:
        obj.__doc__ = new
    except (AttributeError, TypeError):  # a builtin or a slot-less property subclass: leave it
        pass


def _doc_indent(doc: str) -> int:
    """Indentation of a docstring's body: that of its second non-empty line (the summary line
    starts right after the quotes, so it says nothing)."""
    lines = [line for line in doc.splitlines() if line.strip()]
    if len(lines) < 2:
        return 0
    return len(lines[1]) - len(lines[1].lstrip())


def _mark_annotated(obj: Any, type: AnnotationType = AnnotationType.UNKNOWN,  # noqa: A002 - Ray's name
                    api_group: str = "Others") -> None:
    """Tag the object for API linters. The tag records the name, so a subclass of a tagged
    class (which inherits the attributes) is not taken for tagged itself."""
    name = getattr(obj, "__name__", None)
    if name is None:
        return
    try:
        obj._annotated = name
        obj._annotated_type = type
        obj._annotated_api_group = api_group
    except (AttributeError, TypeError):
        pass


def _is_annotated(obj: Any) -> bool:
    return getattr(obj, "_annotated", None) == getattr(obj, "__name__", object())


def _get_annotation_type(obj: Any) -> str | None:
    return obj._annotated_type.value if _is_annotated(obj) else None


__all__ = ["AnnotationType", "Deprecated", "DeveloperAPI", "PublicAPI", "RayDeprecationWarning"]
