"""`raylite.util.inspect_serializability`: find what in an object cannot be pickled."""

from __future__ import annotations

from typing import Any, NamedTuple


class FailureTuple(NamedTuple):
    """One object that failed to serialize, its name, and the object that holds it."""

    obj: Any
    name: str
    parent: Any


def inspect_serializability(base_obj: Any, name: str | None = None, depth: int = 3,
                            print_file: Any = None) -> tuple[bool, set[FailureTuple]]:
    """Check that `base_obj` can be sent to a task; returns (ok, failures) as Ray does.

    Each failure names the innermost member that cannot be pickled (an attribute,
    an item of a container, or a variable a function closes over), so the fix is clear.
    """
    label = name or getattr(base_obj, "__qualname__", None) or type(base_obj).__name__
    if _picklable(base_obj):
        return True, set()
    found: list[tuple[Any, str, Any]] = []  # (object, name, parent)
    _walk(base_obj, label, None, depth, found)
    if not found:
        found.append((base_obj, label, None))
    lines = [f"Checking serializability of {label}: it cannot be serialized."]
    for obj, where, _parent in sorted(found, key=lambda f: f[1]):
        lines.append(f"  {where} ({type(obj).__name__}) is not serializable")
    print("\n".join(lines), file=print_file)
    return False, {_failure(*f) for f in found}


def _members(obj: Any, label: str) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(f"{label}[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"{label}[{i}]", v) for i, v in enumerate(obj)]
    code = getattr(obj, "__code__", None)
    if code is not None:  # a function: what it closes over and the globals it uses
        out = []
        for var, cell in zip(code.co_freevars, getattr(obj, "__closure__", None) or ()):
            try:
                out.append((f"{label}.<closure {var}>", cell.cell_contents))
            except ValueError:
                pass
        glb = getattr(obj, "__globals__", {})
        out += [(f"{label}.<global {n}>", glb[n]) for n in code.co_names if n in glb]
        return out
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return [(f"{label}.{k}", v) for k, v in vars(obj).items()]
    return []


def _picklable(obj: Any) -> bool:
    from raylite.api import is_picklable

    return is_picklable(obj)


def _walk(obj: Any, label: str, parent: Any, depth: int, found: list) -> None:
    bad = [(n, m) for n, m in _members(obj, label) if not _picklable(m)]
    if not bad or depth <= 0:
        found.append((obj, label, parent))
        return
    for n, m in bad:
        _walk(m, n, obj, depth - 1, found)


def _failure(obj: Any, name: str, parent: Any) -> FailureTuple:
    try:
        hash(obj)
        hash(parent)
    except TypeError:  # a set needs hashable members: keep the names, describe the objects
        return FailureTuple(repr(obj)[:200], name, repr(parent)[:200] if parent is not None else None)
    return FailureTuple(obj, name, parent)
