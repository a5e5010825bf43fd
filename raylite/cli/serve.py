"""`raylite serve ...`: the `serve` command line, loaded only when used.

The real commands live in raylite.serve.scripts; importing them pulls in Serve (Starlette,
uvicorn, ...), which `raylite --help` or `raylite start` must not pay for. This group forwards
to them on first use.
"""

from __future__ import annotations

from typing import Any

import click


class _LazyServeGroup(click.Group):
    def _real(self) -> click.Group:
        from raylite.serve.scripts import main

        return main

    def list_commands(self, ctx: click.Context) -> list[str]:
        return self._real().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> Any:
        return self._real().get_command(ctx, cmd_name)


serve = _LazyServeGroup(name="serve", context_settings={"help_option_names": ["-h", "--help"]},
                        help="Run and manage Serve applications (the same commands as `serve`).")
