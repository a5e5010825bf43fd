"""A CLI command that needs a package of an extra which is not installed says so in one line,
naming the extra (`serve run` without pydantic once ended in click's internals and
`ModuleNotFoundError: No module named 'pydantic'`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from raylite.cli.extras import ExtrasGroup, missing_extra

REPO = Path(__file__).resolve().parents[2]

# runs a CLI entry point with pydantic absent, as in an install without the serve extra
WITHOUT_PYDANTIC = """
import sys
sys.modules["pydantic"] = None
sys.argv = [sys.argv[1], *sys.argv[2:]]
if sys.argv[0] == "serve":
    from raylite.serve.scripts import main
else:
    from raylite.cli import main
main()
"""


@pytest.mark.parametrize("argv, path", [
    (["serve", "run", "app:app"], "serve run"),
    (["serve", "status"], "serve status"),
    (["serve", "deploy", "config.yaml"], "serve deploy"),
    (["raylite", "serve", "run", "app:app"], "raylite serve run"),
])
def test_serve_commands_without_the_serve_extra_say_so_in_one_line(tmp_path, argv, path):
    (tmp_path / "config.yaml").write_text("applications: []\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYLITE_TEMP_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", WITHOUT_PYDANTIC, *argv], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [f"Error: `{path}` needs pydantic, which comes with raylite's serve extra: "
                     "pip install 'raylite[serve]'"], proc.stderr


def test_other_import_errors_are_not_hidden():
    @click.group(cls=ExtrasGroup, name="tool")
    def tool():
        pass

    @tool.command()
    def go():
        import raylite_no_such_module  # noqa: F401

    with pytest.raises(ModuleNotFoundError):
        tool.main(["go"], standalone_mode=True)


def test_missing_extra_follows_the_cause_chain():
    try:
        try:
            raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")
        except ImportError as inner:
            raise RuntimeError("could not read the files") from inner
    except RuntimeError as e:
        assert missing_extra(e) == ("data", "pyarrow")
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None
