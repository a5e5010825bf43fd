"""bench/conformance.py's `import ray` shim and the example extraction of
bench/docstring_examples.py (the conformance suite's own tooling, without Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import conformance  # noqa: E402
import docstring_examples  # noqa: E402


def test_shim_makes_ray_the_raylite_modules(tmp_path):
    shim = conformance.write_shim(tmp_path / "shim", sys.executable)
    code = ("import ray, raylite, ray.util.placement_group, ray.dag\n"
            "from ray.data.aggregate import Count\n"
            "import raylite.data.aggregate as agg\n"
            "assert ray is raylite and ray.dag is raylite.dag and Count is agg.Count\n"
            "assert ray.util.placement_group is __import__('raylite.util.placement_group').util.placement_group\n"
            "try:\n    import ray.no_such_module\nexcept ModuleNotFoundError:\n    print('ok')\n")
    env = {**os.environ, "PYTHONPATH": f"{shim}:{REPO}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert os.access(shim / "bin" / "ray", os.X_OK)


def test_rst_page_becomes_its_testcode_blocks():
    page = textwrap.dedent("""
        Title
        =====

        .. testcode::

            x = 1

        .. testoutput::

            1

        .. testcode::
            :skipif: True

            never()

        .. tab-set::

            .. tab-item:: A

                .. testcode::

                    y = x + 1
        """)
    assert conformance.rst_testcode(page) == "x = 1\n\ny = x + 1\n"


def test_docstring_examples_are_written_per_docstring(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(textwrap.dedent('''
        def f():
            """Example:

                >>> a = 2
                >>> a * 3
                6
                >>> skipped()  # doctest: +SKIP
            """

        class C:
            def m(self):
                """Say hi.

                .. testcode::

                    print("hi")
                """

            def quiet(self):
                """No examples."""
        '''))
    written = docstring_examples.extract(source, tmp_path / "out", "mod")
    assert sorted(p.name for p in written) == ["mod__C.m.py", "mod__f.py"]
    assert (tmp_path / "out" / "mod__f.py").read_text() == "a = 2\na * 3\n"
    assert (tmp_path / "out" / "mod__C.m.py").read_text() == 'print("hi")\n'
