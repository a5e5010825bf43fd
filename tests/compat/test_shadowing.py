"""compat/ray refuses to stand next to a real Ray: at import (a real Ray's compiled `_raylet` or
its distribution metadata visible on sys.path) and at install (pip would replace Ray).

"A real Ray" here is a fake one made in a temporary directory (a `ray` package with a
`_raylet.so` file, or a `ray-2.60.0.dist-info`): nothing is installed into this Python."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import REPO, requires_alias, run_python

pytestmark = requires_alias

IMPORT_AFTER = r'''
import sys
sys.path.append({site!r})  # after the alias's own entry: the alias would hide this Ray
try:
    import ray
except ImportError as e:
    print("REFUSED", "raylite" in sys.modules)
    print(e)
else:
    print("LOADED", ray.__version__)
'''


def _import_with(site: str) -> tuple[str, str]:
    out = run_python(IMPORT_AFTER.format(site=site))
    assert out.returncode == 0, out.stderr
    first, _, rest = out.stdout.partition("\n")
    return first, rest


def test_a_real_rays_compiled_core_next_to_the_alias_is_refused(tmp_path):
    package = tmp_path / "ray"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('the fake Ray must never be imported')\n")
    (package / "_raylet.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    first, message = _import_with(str(tmp_path))
    assert first == "REFUSED False"  # refused before raylite (or anything) was started
    assert str(package / "_raylet.cpython-311-x86_64-linux-gnu.so") in message
    assert "compat/ray" in message or "alias" in message
    assert "pip uninstall ray" in message and "virtualenv" in message


def test_a_real_rays_metadata_is_refused(tmp_path):
    dist = tmp_path / "ray-2.60.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n")
    first, message = _import_with(str(tmp_path))
    assert first == "REFUSED False"
    assert str(dist) in message


def test_the_alias_own_metadata_and_lookalike_names_are_not_a_real_ray(tmp_path):
    for name in ("ray-2.60.0+raylite.0.1.0.dist-info", "raylite-0.1.0.dist-info",
                 "ray_lightning-0.3.0.dist-info", "ray-tools.dist-info"):
        (tmp_path / name).mkdir()
    (tmp_path / "ray").mkdir()  # a `ray` directory without Ray's compiled core
    (tmp_path / "ray" / "notes.txt").write_text("x")
    first, _ = _import_with(str(tmp_path))
    assert first == "LOADED 2.60.0"


def test_installing_the_alias_over_a_real_ray_stops_with_the_fix(tmp_path):
    """pip would uninstall a Ray named `ray` to make room; the build refuses first, naming both."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    dist = os.path.join(site, "ray-2.60.0.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n")
    out = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          os.path.join(REPO, "compat", "ray")], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert f"Ray 2.60.0 is installed in {site}" in text
    assert "pip uninstall ray" in text and "separate virtualenv" in text
    assert os.listdir(site) == ["ray-2.60.0.dist-info"]  # nothing was installed, Ray left alone
