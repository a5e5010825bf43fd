"""Write the examples in a Python module's docstrings out as runnable programs.

    python bench/docstring_examples.py /opt/rayvenv/lib/python3.11/site-packages/ray/data/aggregate.py \\
        /work/conformance/data --prefix aggregate

Ray's API reference shows examples in docstrings, as `.. testcode::` blocks and as doctest
`>>>` lines. For each docstring (module, class, function, method) that has any, this writes
`<prefix>__<qualified name>.py` holding its testcode blocks (those marked `:skipif: True` left
out) and then its doctest sources (lines marked `# doctest: +SKIP` left out; expected outputs
are not checked). The source is parsed, never imported, so any interpreter can run this. The
programs are meant for `bench/conformance.py`, in a directory outside this repository.
"""

from __future__ import annotations

import argparse
import ast
import doctest
import sys
import textwrap
from pathlib import Path

_PARSER = doctest.DocTestParser()
_DEFS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def testcode_blocks(text: str) -> list[str]:
    """The bodies of the `.. testcode::` directives in reStructuredText `text`."""
    lines = text.splitlines()
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip().startswith(".. testcode::"):
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        i += 1
        skip = False
        while i < len(lines) and lines[i].strip().startswith(":"):
            skip = skip or lines[i].strip().replace(" ", "").lower().startswith(":skipif:true")
            i += 1
        body = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        if not skip:
            blocks.append(textwrap.dedent("\n".join(body)).strip("\n") + "\n")
    return blocks


def program_of(docstring: str) -> str:
    """The runnable program a docstring's examples make ("" when it has none)."""
    parts = testcode_blocks(docstring)
    if ">>>" in docstring:
        parts.append("".join(e.source for e in _PARSER.get_examples(docstring)
                             if not e.options.get(doctest.SKIP)))
    code = "\n".join(p for p in parts if p.strip())
    return "" if code.strip() in ("", "import ray") else code


def extract(source: Path, out_dir: Path, prefix: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def visit(node: ast.AST, qualname: str) -> None:
        if isinstance(node, _DEFS):
            doc = ast.get_docstring(node, clean=True)
            code = program_of(doc) if doc else ""
            if code:
                path = out_dir / f"{prefix}__{qualname or 'module'}.py"
                path.write_text(code)
                written.append(path)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{qualname}.{child.name}" if qualname else child.name)

    visit(ast.parse(source.read_text()), "")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a .py file whose docstrings hold examples")
    parser.add_argument("out_dir", type=Path, help="where to write the programs")
    parser.add_argument("--prefix", help="file name prefix (default: the source's stem)")
    args = parser.parse_args(argv)
    written = extract(args.source, args.out_dir, args.prefix or args.source.stem)
    print(f"{args.source}: {len(written)} programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
