"""Import contracts from STYLE.md, checked on the source with `ast`."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "raylite"
ROLES = {"head", "node", "worker", "driver"}
PURE = {"control_store", "object_store", "reference_counter", "scheduling"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_libraries_use_only_public_api():
    for lib in ("data", "train", "serve", "util", "dag"):
        for path in (ROOT / lib).rglob("*.py") if (ROOT / lib).exists() else []:
            bad = [m for m in _imports(path) if m.startswith("raylite._core")]
            assert not bad, f"{path.relative_to(ROOT.parent)} imports Core internals: {bad}"


def test_roles_do_not_import_each_other():
    for role in ROLES:
        path = ROOT / "_core" / f"{role}.py"
        others = {f"raylite._core.{r}" for r in ROLES - {role}}
        bad = _imports(path) & others
        assert not bad, f"{role}.py imports other process roles: {bad}"


def test_pure_modules_have_no_io():
    for name in PURE:
        imports = _imports(ROOT / "_core" / f"{name}.py")
        bad = {m for m in imports if m.split(".")[0] in ("asyncio", "socket", "selectors")
               or m.startswith("raylite._core.transport")}
        assert not bad, f"{name}.py must stay pure but imports {bad}"


def test_core_does_not_import_public_layer():
    public = {"raylite.api", "raylite.actor", "raylite.remote_function", "raylite.data",
              "raylite.train", "raylite.serve", "raylite.util"}
    for path in (ROOT / "_core").rglob("*.py"):
        bad = {m for m in _imports(path) if any(m == p or m.startswith(p + ".") for p in public)}
        assert not bad, f"{path.name} imports the public layer: {bad}"


def test_dashboard_talks_to_the_head_only_through_messages():
    """raylite/dashboard (L6) may use L0-L2 core modules (ids, config, protocol, transport, ...),
    never the process roles or a driver's client."""
    forbidden = {f"raylite._core.{m}" for m in (*ROLES, "core_client", "worker_pool", "node_main", "cluster")}
    for path in (ROOT / "dashboard").rglob("*.py"):
        bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"
