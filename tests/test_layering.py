"""Import contracts from STYLE.md, checked on the source with `ast`."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "raylite"
CORE = ROOT / "_core"

# _core's rooms and their layers (docs/architecture.md draws them). A module may import from its
# own room, from a lower layer, or from a room its row names; the four process roles (head,
# node, worker, and the driver's client) never import each other.
TOP = "(top)"  # the vocabulary: ids, config, clock, resources, protocol, serialization, ...
ROOMS: dict[str, tuple[int, set[str]]] = {
    TOP: (1, set()),
    "transport": (2, set()),
    "client": (4, set()),
    "node": (4, {"runtime_env"}),
    "head": (4, set()),
    "worker": (4, {"client", "runtime_env"}),
    "runtime_env": (4, set()),
    "ray_client": (4, {"client", "cluster"}),
    "cluster": (5, {"client", "ray_client", "node", "head", "runtime_env"}),
}
# Edges that cross between rooms of one layer without their row's leave. Empty since the last
# three (issue 34) were removed: shared vocabulary lives at _core's top. None may be added.
KNOWN_CROSSINGS: set[tuple[str, str]] = set()
ROLES = {"head", "node", "worker", "client"}
PURE = {"control_store": "head", "object_store": "node", "reference_counter": "client",
        "lease_table": "node", "object_plane": "node", "worker_index": "node", "scheduling": None}


def _room(module: str) -> str | None:
    """The room of a module under raylite._core (TOP for the vocabulary), else None."""
    parts = module.split(".")
    if parts[:2] != ["raylite", "_core"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in ROOMS else TOP


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


def _core_modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(ROOT.parent).with_suffix("").parts): p
            for p in CORE.rglob("*.py") if p.name != "__init__.py"}


def _core_edges() -> set[tuple[str, str]]:
    """(importer, imported) between _core modules, both named below raylite._core."""
    modules = _core_modules()
    edges = set()
    for name, path in modules.items():
        for imported in _imports(path):
            if imported in modules and imported != name:
                edges.add((name.removeprefix("raylite._core."), imported.removeprefix("raylite._core.")))
    return edges


def test_core_rooms_import_only_down_or_where_their_row_says():
    bad = []
    for src, dst in sorted(_core_edges()):
        a, b = _room(f"raylite._core.{src}"), _room(f"raylite._core.{dst}")
        if a == b:
            continue
        (layer_a, allowed), (layer_b, _) = ROOMS[a], ROOMS[b]
        if layer_b < layer_a or b in allowed or (src, dst) in KNOWN_CROSSINGS:
            continue
        bad.append(f"{src} ({a}, L{layer_a}) imports {dst} ({b}, L{layer_b})")
    assert not bad, "imports that go up or across _core's rooms:\n  " + "\n  ".join(bad)


def test_known_crossings_still_exist():
    """A crossing that was removed comes off the list, so the list only shrinks."""
    gone = KNOWN_CROSSINGS - _core_edges()
    assert not gone, f"remove these from KNOWN_CROSSINGS: {sorted(gone)}"


def test_every_core_module_lives_in_a_known_room():
    for name in _core_modules():
        parts = name.split(".")
        assert len(parts) == 3 or parts[2] in ROOMS, f"{name}: add its folder to ROOMS"


def test_libraries_use_only_public_api():
    for lib in ("data", "train", "serve", "util", "dag", "autoscaler", "tune"):
        for path in (ROOT / lib).rglob("*.py") if (ROOT / lib).exists() else []:
            bad = [m for m in _imports(path) if m.startswith("raylite._core")]
            assert not bad, f"{path.relative_to(ROOT.parent)} imports Core internals: {bad}"


def test_roles_do_not_import_each_other():
    for src, dst in _core_edges():
        a, b = src.split(".")[0], dst.split(".")[0]
        if a in ROLES and b in ROLES and a != b and (src, dst) not in KNOWN_CROSSINGS:
            assert b in ROOMS[a][1], f"{src} ({a}) imports another process role: {dst} ({b})"


def test_pure_modules_have_no_io():
    for name, room in PURE.items():
        path = CORE / (f"{room}/{name}.py" if room else f"{name}.py")
        imports = _imports(path)
        bad = {m for m in imports if m.split(".")[0] in ("asyncio", "socket", "selectors")
               or m.startswith("raylite._core.transport")}
        assert not bad, f"{name}.py must stay pure but imports {bad}"


def test_core_does_not_import_public_layer():
    public = {"raylite.api", "raylite.actor", "raylite.remote_function", "raylite.data",
              "raylite.train", "raylite.serve", "raylite.util", "raylite.tune"}
    for path in (ROOT / "_core").rglob("*.py"):
        bad = {m for m in _imports(path) if any(m == p or m.startswith(p + ".") for p in public)}
        assert not bad, f"{path.name} imports the public layer: {bad}"


# the public layer's own modules (beside the libraries, which see only the public API at all)
PUBLIC_LAYER_EXCLUDED = {"_core", "dashboard", "cli", "testing", "job_submission"}  # L6 may speak the wire


def test_public_layer_never_speaks_the_wire():
    """raylite's public modules (api, actor, placement_group, _state, experimental, ...) ask Core
    through the CoreAPI methods of `runtime.client()`; only Core builds protocol messages."""
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[0] in PUBLIC_LAYER_EXCLUDED:
            continue
        bad = {m for m in _imports(path) if m == "raylite._core.protocol" or m.startswith("raylite._core.protocol.")}
        assert not bad, f"{path.relative_to(ROOT.parent)} builds wire messages: {bad}; add a CoreAPI method"


def test_dashboard_talks_to_the_head_only_through_messages():
    """raylite/dashboard (L6) may use L0-L2 core modules (ids, config, protocol, transport, ...),
    never the process roles or a driver's client."""
    forbidden = {f"raylite._core.{m}" for m in (
        "head.head", "node.node", "worker.worker", "client", "ray_client", "node.worker_pool",
        "cluster.driver", "cluster.daemon", "cluster.cluster")}
    for path in (ROOT / "dashboard").rglob("*.py"):
        bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"


# --- no import cycles -------------------------------------------------------------------------
#
# A reader should be able to learn the package bottom-up: every module only needs the modules
# below it. So the graph of imports between raylite's modules must have no cycle. Every import
# statement counts, including one inside a function (moving an import into a function to dodge a
# cycle leaves the cycle in place); imports under `if TYPE_CHECKING:` do not (they never run).
# `from pkg import name` is an edge to the module `pkg.name` when that is a module, else to `pkg`
# (its __init__). Importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`; those implied
# edges are not counted, since a reader of `a.b.c` does not need the package's facade. A facade
# that re-exports a submodule while that submodule imports a name from the facade is a cycle.
# `importlib.import_module(<string>)` (the PEP 562 lazy loading in the facades) is not an import
# statement and is not counted.


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _executed_imports(tree: ast.AST):
    """Every Import/ImportFrom node in the tree, except those in the body of `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _import_graph(root: pathlib.Path = ROOT) -> dict[str, dict[str, list[tuple[int, str]]]]:
    """{module: {imported module: [(line, what is imported)]}} between the package's modules."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, dict[str, list[tuple[int, str]]]] = {m: {} for m in files}

    def add(src: str, dst: str, line: int, what: str) -> None:
        if dst in files and dst != src:
            graph[src].setdefault(dst, []).append((line, what))

    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _executed_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(mod, alias.name, node.lineno, f"import {alias.name}")
                continue
            base = node.module or ""
            if node.level:  # relative: `from . import x` is in `package`, each further dot one up
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                target = f"{base}.{alias.name}"
                add(mod, target if target in files else base, node.lineno, alias.name)
    return graph


def _strongly_connected(graph: dict[str, dict[str, list[tuple[int, str]]]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on deep import chains)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _cycles_through(component: list[str],
                    graph: dict[str, dict[str, list[tuple[int, str]]]]) -> list[list[str]]:
    """One shortest cycle through each edge inside the component, without repeats."""
    members = set(component)
    cycles: dict[tuple[str, ...], list[str]] = {}
    for src in component:
        for dst in sorted(graph[src]):
            if dst not in members:
                continue
            previous = {dst: dst}  # breadth-first search from dst back to src
            frontier = [dst]
            while src not in previous:
                next_frontier = []
                for node in frontier:
                    for succ in sorted(graph[node]):
                        if succ in members and succ not in previous:
                            previous[succ] = node
                            next_frontier.append(succ)
                frontier = next_frontier
            path = [src]
            while path[-1] != dst:
                path.append(previous[path[-1]])
            cycle = [src, *reversed(path[1:])]  # src -> dst -> ... -> (src)
            start = cycle.index(min(cycle))
            key = tuple(cycle[start:] + cycle[:start])
            cycles.setdefault(key, list(key))
    return sorted(cycles.values())


def import_cycles(root: pathlib.Path = ROOT) -> list[tuple[list[str], list[str]]]:
    """[(component, [cycle described as 'a -[names]-> b -[names]-> a'])]."""
    graph = _import_graph(root)
    found = []
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        described = []
        for cycle in _cycles_through(component, graph):
            steps = [cycle[0]]
            for src, dst in zip(cycle, cycle[1:] + cycle[:1]):
                names = ", ".join(f"{what} (line {line})" for line, what in sorted(set(graph[src][dst])))
                steps.append(f" -[{names}]-> {dst}")
            described.append("".join(steps))
        found.append((component, described))
    return sorted(found)


def test_no_import_cycles():
    found = import_cycles()
    report = "\n".join(f"cycle among {', '.join(component)}:\n    " + "\n    ".join(cycles)
                       for component, cycles in found)
    assert not found, f"{len(found)} import cycles in raylite/ (move the shared name down):\n{report}"


def test_cycle_checker_counts_function_level_imports_only(tmp_path):
    files = {
        "__init__.py": "from pkg.a import x\n",  # a facade re-exporting a submodule's name
        "a.py": "from pkg import helper\n",  # a name of the facade, not a module: a cycle
        "sub/__init__.py": "",
        "sub/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import top\n",
        "sub/mid.py": "def f():\n    from .. import top\n",  # relative, inside a function: counted
        "top.py": "from pkg.sub import low, mid\n",  # two modules of pkg.sub, not pkg.sub itself
    }
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    found = import_cycles(tmp_path / "pkg")
    assert [component for component, _ in found] == [["pkg", "pkg.a"], ["pkg.sub.mid", "pkg.top"]]
    assert found[1][1] == ["pkg.sub.mid -[top (line 2)]-> pkg.top -[mid (line 1)]-> pkg.sub.mid"]
