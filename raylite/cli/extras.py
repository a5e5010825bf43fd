"""One line, not a traceback, when a command needs a package of an extra that is not installed.

`pip install raylite` installs the core; Serve's commands need pydantic and httptools (the
`serve` extra), Data's pyarrow, and so on. A command that imports one of them deep inside used
to end in a screen of click internals and `ModuleNotFoundError: No module named 'pydantic'`.
`ExtrasGroup` (the `raylite` and `serve` groups' class) turns that into
`Error: `serve run` needs pydantic, which comes with raylite's serve extra: pip install 'raylite[serve]'`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

# top-level module -> (the extra that brings it, its pip name)
EXTRAS: dict[str, tuple[str, str]] = {
    "pydantic": ("serve", "pydantic"),
    "httptools": ("serve", "httptools"),
    "pyarrow": ("data", "pyarrow"),
    "pandas": ("data", "pandas"),
    "fsspec": ("data", "fsspec"),
    "torch": ("train", "torch"),
    "transformers": ("llm", "transformers"),
    "redis": ("redis", "redis"),
}


def missing_extra(exc: BaseException) -> tuple[str, str] | None:
    """(extra, package) when `exc`, or an error it was raised from, is a missing module of an extra."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            hit = EXTRAS.get(exc.name.split(".")[0])
            if hit is not None:
                return hit
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def install_hint(extra: str) -> str:
    return f"pip install 'raylite[{extra}]'"


class ExtrasGroup(click.Group):
    """A click group whose commands, failing for want of an extra's package, say so in one line."""

    def main(self, args: Any = None, prog_name: str | None = None, *rest: Any, **kwargs: Any) -> Any:
        try:
            return super().main(args, prog_name, *rest, **kwargs)
        except ImportError as e:
            hit = missing_extra(e)
            if hit is None:
                raise
            extra, package = hit
            argv = list(sys.argv[1:] if args is None else args)
            click.echo(f"Error: `{self._command_path(argv, prog_name)}` needs {package}, which comes "
                       f"with raylite's {extra} extra: {install_hint(extra)}", err=True)
            sys.exit(1)

    def _command_path(self, argv: list[str], prog_name: str | None) -> str:
        """`serve run`, `raylite start`: the program and the subcommands named in argv."""
        name = prog_name or os.path.basename(sys.argv[0] if sys.argv else "")
        if not name or name.endswith(".py") or name == "-c":
            name = self.name or "raylite"
        words = [name]
        cmd: click.Command = self
        for arg in argv:
            if arg.startswith("-") or not isinstance(cmd, click.Group):
                continue
            try:
                sub = cmd.get_command(click.Context(cmd), arg)
            except Exception:  # noqa: BLE001  a lazy group that cannot load: stop here
                sub = None
            if sub is None:
                break
            words.append(arg)
            cmd = sub
        return " ".join(words)
