"""bench/conformance.py's `import ray` shim and the example extraction of
bench/docstring_examples.py (the conformance suite's own tooling, without Ray)."""

from __future__ import annotations

import json
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


def test_compat_alias_is_the_compat_ray_distribution(tmp_path):
    """The default alias is compat/ray, what users install: `ray` is its package (not raylite
    itself), its modules are raylite's, and the `ray` command is its entry point."""
    shim = conformance.write_shim(tmp_path / "shim", sys.executable, "compat")
    assert not (shim / "ray").exists()
    env = conformance.raylite_env(shim, REPO, tmp_path / "temp", "compat")
    code = ("import ray, raylite, ray.dag\n"
            "assert ray is not raylite and ray.dag is raylite.dag and ray.init is raylite.init\n"
            "print(ray.__file__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(REPO / "compat" / "ray" / "src" / "ray" / "__init__.py")
    version = subprocess.run([str(shim / "bin" / "ray"), "--version"], capture_output=True, text=True,
                             env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("ray, version 2.60.0 (raylite ")


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


def test_examples_of_subdirectories_run_beside_their_siblings(tmp_path):
    """Serve's examples import a sibling module: `--siblings` copies the example's directory into
    its fresh working directory; `--recursive` finds examples in subdirectories; `_` files are helpers."""
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "helper_mod.py").write_text("VALUE = 7\n")
    (tmp_path / "guide" / "uses_sibling.py").write_text(
        "import os, helper_mod\nassert helper_mod.VALUE == 7\nopen('left_behind', 'w').close()\n")
    (tmp_path / "_private.py").write_text("raise SystemExit(1)\n")
    (tmp_path / "top.py").write_text("pass\n")
    assert [p.name for p in conformance.find_examples(tmp_path, recursive=False)] == ["top.py"]
    found = conformance.find_examples(tmp_path, recursive=True)
    assert [str(p.relative_to(tmp_path)) for p in found] == ["guide/helper_mod.py", "guide/uses_sibling.py",
                                                              "top.py"]
    script = tmp_path / "guide" / "uses_sibling.py"
    env = dict(os.environ)
    assert conformance.run_one(sys.executable, script, env, 60, siblings=True).ok
    alone = conformance.run_one(sys.executable, script, env, 60, siblings=False)
    assert not alone.ok and "helper_mod" in alone.tail
    assert not (tmp_path / "guide" / "left_behind").exists()  # the example's own directory is untouched


def test_directories_are_named_and_ray_verdicts_reused_only_for_the_same_file(tmp_path):
    assert conformance.named_directory("serve=/x/examples") == ("serve", Path("/x/examples"))
    assert conformance.named_directory("/x/core") == ("core", Path("/x/core"))
    examples = tmp_path / "lib"
    examples.mkdir()
    (examples / "a.py").write_text("pass\n")
    results = tmp_path / "results.json"
    fake_ray = tmp_path / "fake_ray_python"  # Ray's verdict must come from the file, never a run
    fake_ray.write_text("#!/bin/sh\nexit 3\n")
    fake_ray.chmod(0o755)
    sha = conformance.file_sha(examples / "a.py")
    run = {"ok": True, "returncode": 0, "seconds": 1.0, "timed_out": False, "tail": ""}
    results.write_text(json.dumps([{"library": "lib", "name": "a.py", "sha": sha, "ray": run}]))
    args = [str(examples), "--ray-python", str(fake_ray), "--results", str(results), "--reuse-ray",
            "--shim-dir", str(tmp_path / "shim")]
    conformance.main(args)
    [v] = json.loads(results.read_text())
    assert v["ray"]["ok"] and v["raylite"]["ok"]
    (examples / "a.py").write_text("pass  # changed\n")
    conformance.main(args)
    [v] = json.loads(results.read_text())
    assert not v["ray"]["ok"] and v["ray"]["returncode"] == 3 and v["raylite"] is None


def test_the_test_module_runner_names_what_a_side_cannot_import(monkeypatch):
    import conformance_tests

    monkeypatch.setattr(conformance_tests, "HARNESS_NEEDS", ("json", "surely_not_a_module_xyz"))
    env = dict(os.environ)
    assert conformance_tests.missing_harness_modules(sys.executable, env) == ["surely_not_a_module_xyz"]
    problem = conformance_tests.harness_problem("ray", sys.executable, env, "/tmp/extra")
    assert "cannot import surely_not_a_module_xyz" in problem
    assert "install --target /tmp/extra surely-not-a-module-xyz" in problem
    monkeypatch.setattr(conformance_tests, "HARNESS_NEEDS", ("json",))
    assert conformance_tests.harness_problem("ray", sys.executable, env, "/tmp/extra") == ""
