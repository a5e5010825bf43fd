"""runtime_env ``pip`` / ``uv``: packages installed into a cached virtualenv, as Ray does.

Requirements the node's Python already satisfies need nothing. Otherwise: one environment
per machine, interpreter and requirement list: ``<temp_dir>/runtime_resources/pip/<key>``,
where the key hashes the requirements, the install options, the Python version and the
site directories of the interpreter that runs raylite.

The environment is layered over that interpreter, whatever it is (a system Python, a
``python -m venv``, ``virtualenv`` or ``uv venv`` environment, a conda env): it is made
without system site-packages, and a ``.pth`` file in its site-packages adds the running
interpreter's own site directories (``site.getsitepackages()``, the user site where that
interpreter uses it) after its own. So raylite, its dependencies and everything the user
installed stay importable, and the requested packages shadow them. ``--system-site-packages``
is not used: from inside a virtualenv it layers over the *base* interpreter's site-packages,
which lack raylite's dependencies and the user's packages.

Creation is locked (an flock on ``<key>.lock``), so a job's supervisor and the workers of one
node asking at once build it once; a finished environment holds ``READY`` and is reused by
every later job and worker on the machine. ``uv pip install`` is used where ``uv`` is on PATH
and runtime_env ``uv`` asks for it (or this Python has no pip), ``python -m pip`` otherwise.

A job's entrypoint runs with the environment's ``bin`` first on PATH (``python`` is the
venv's); a worker, forked from the node's interpreter, puts the environment's
site-packages first on ``sys.path``.

Accepted forms (Ray's): ``["pkg==1.0", "/path/to/pkg.whl"]``; ``{"packages": [...],
"pip_install_options": [...], "pip_check": False}``; a path to a requirements file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

from raylite._core.private_paths import owned_dir

READY = "READY"
_LOG_TAIL_CHARS = 4000


class PipEnvError(RuntimeError):
    """The environment could not be built; the message carries the installer's output."""


def wanted(runtime_env: dict | None) -> tuple[str, Any] | None:
    """``("pip" | "uv", spec)`` when the runtime_env asks for packages, else None."""
    for key in ("pip", "uv"):
        spec = (runtime_env or {}).get(key)
        if spec:
            return key, spec
    return None


def requirements(spec: Any) -> tuple[list[str], list[str]]:
    """``(requirements, install options)`` of a pip/uv spec, validated."""
    options: list[str] = []
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"packages", "pip_install_options", "uv_pip_install_options",
                                      "pip_check", "pip_version", "uv_version"})
        if unknown:
            raise ValueError(f"runtime_env pip/uv got unknown field(s) {unknown}; use 'packages' and "
                             "'pip_install_options'.")
        options = list(spec.get("pip_install_options") or spec.get("uv_pip_install_options") or [])
        spec = spec.get("packages") or []
    if isinstance(spec, str):
        if os.path.isfile(spec):  # a requirements file: its lines
            spec = _requirements_file(spec)
        else:
            spec = [spec]
    if not isinstance(spec, (list, tuple)) or not all(isinstance(r, str) and r.strip() for r in spec):
        raise ValueError("runtime_env pip/uv must be a list of requirement strings, a requirements file "
                         f"path, or {{'packages': [...]}}; got {spec!r}")
    if not all(isinstance(o, str) for o in options):
        raise ValueError(f"pip_install_options must be strings, got {options!r}")
    return [r.strip() for r in spec], options


def _requirements_file(path: str) -> list[str]:
    """The lines of a requirements file, each checked to be a requirement (or a pip option)
    before anything uses it. A line that is neither is refused by its number only: the file is
    read on the machine that builds the environment (a job's on the head), and an error that
    quoted it would hand any readable file (`pip: /etc/...`) back to whoever named it."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - packaging ships with pip
        Requirement = None  # noqa: N806
    lines = []
    with open(path, errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if Requirement is not None and not line.startswith("-") and "://" not in line:
                try:
                    Requirement(line)
                except InvalidRequirement:
                    raise ValueError(f"runtime_env pip/uv file {path!r}: line {n} is not a requirement "
                                     "(its content is not shown); pass a requirements.txt") from None
            lines.append(line)
    return lines


def env_key(tool: str, spec: Any) -> str:
    """Environments differ by what they hold and by the interpreter they layer over: two
    virtualenvs on one machine never share a job environment."""
    reqs, options = requirements(spec)
    blob = json.dumps([tool, reqs, options, sys.version_info[:2], base_site_dirs()], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def env_dir(base_dir: str, tool: str, spec: Any) -> str:
    return os.path.join(base_dir, "runtime_resources", "pip", env_key(tool, spec))


def site_packages(venv: str) -> str:
    """The environment's site-packages: the path its own Python reported when it was built,
    else the ``venv`` install scheme's (a distribution's default scheme, such as Debian's
    ``posix_local``, names a different folder)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(os.path.join(venv, READY)) as f:
            return json.load(f)["site_packages"]
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    return sysconfig.get_path("purelib", scheme, vars={"base": venv, "platbase": venv})


def base_site_dirs() -> list[str]:
    """The site directories of the interpreter running raylite, in its own order: its
    site-packages (a virtualenv's, then its base's where it includes system site-packages;
    a conda env's; a system Python's) and its user site where it uses one."""
    import site

    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        user = site.getusersitepackages()
        if os.path.isdir(user):
            dirs.append(user)
    seen: set[str] = set()
    return [d for d in dirs if os.path.isdir(d) and not (d in seen or seen.add(d))]


LAYER_PTH = "_raylite_base_interpreter.pth"


def _layer_pth(dirs: list[str]) -> str:
    """One .pth line: add the running interpreter's site dirs after the environment's own, each
    through site.addsitedir, so their .pth files (editable installs among them) work even for a
    dir already on sys.path through PYTHONPATH (which reads no .pth files). A worker that
    activates the environment skips this file: it is that interpreter already."""
    return "import site; list(map(site.addsitedir, " + json.dumps(dirs) + "))\n"


def bin_dir(venv: str) -> str:
    return os.path.join(venv, "bin")


def running_virtualenv() -> str | None:
    """The virtualenv (venv, virtualenv, uv venv) whose interpreter runs raylite, activated or
    not; None for a system Python or a conda env (no base interpreter behind it)."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix) and os.path.isdir(bin_dir(sys.prefix)):
        return sys.prefix
    return None


def satisfied_by_base(spec: Any) -> bool:
    """Every requirement is a name (and version range) this Python already has: nothing to
    install, no virtualenv (a path, URL or install option always gets one)."""
    reqs, options = requirements(spec)
    if options:
        return False
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return False
    for text in reqs:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return False
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.url or req.extras:
            return False
        import importlib.metadata  # here: it costs ~18 ms, and a driver's init() needs none of it

        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return False
    return True


def ensure(base_dir: str, tool: str, spec: Any, timeout_s: float = 900.0) -> str | None:
    """The environment's directory, built first if this machine has none yet (locked); None
    when this Python already has every requirement."""
    reqs, options = requirements(spec)
    if satisfied_by_base(spec):
        return None
    venv = env_dir(base_dir, tool, spec)
    if os.path.exists(os.path.join(venv, READY)):
        return venv
    owned_dir(os.path.dirname(venv))
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building it: wait for it
        try:
            if not os.path.exists(os.path.join(venv, READY)):
                _build(venv, tool, reqs, options, timeout_s)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return venv


def _build(venv: str, tool: str, reqs: list[str], options: list[str], timeout_s: float) -> None:
    """Build in place (the caller holds the lock; READY, written last, marks it finished): the
    console scripts pip writes name the environment's final python in their first line."""
    shutil.rmtree(venv, ignore_errors=True)  # a half-built one from a crashed builder
    try:
        # never --system-site-packages: from a virtualenv, that is its base interpreter's
        _run([sys.executable, "-m", "venv", "--without-pip", venv], "create the virtualenv", timeout_s)
        python = os.path.join(bin_dir(venv), "python")
        site_dir = _own_site_packages(python, timeout_s)
        os.makedirs(site_dir, exist_ok=True)
        layered = base_site_dirs()
        with open(os.path.join(site_dir, LAYER_PTH), "w") as f:
            f.write(_layer_pth(layered))
        uv = shutil.which("uv")
        if uv and tool == "uv" or uv and not _has_pip():
            cmd = [uv, "pip", "install", "--python", python, *options, *reqs]
        else:  # the running interpreter's pip (layered in), run by the venv's python, installs into the venv
            cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *options, *reqs]
        _run(cmd, f"install {reqs}", timeout_s)
        with open(os.path.join(venv, READY + ".tmp"), "w") as f:
            json.dump({"requirements": reqs, "options": options, "site_packages": site_dir,
                       "layered_over": layered}, f)
        os.replace(os.path.join(venv, READY + ".tmp"), os.path.join(venv, READY))
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise


def _own_site_packages(python: str, timeout_s: float) -> str:
    """The new environment's site-packages, as its own Python names it."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    try:
        done = subprocess.run([python, "-I", "-c", code], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s, env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PipEnvError(f"runtime_env pip: the new virtualenv's python could not run: {e}") from e
    if done.returncode != 0 or not done.stdout.strip():
        raise PipEnvError("runtime_env pip: the new virtualenv's python could not run:\n"
                          + done.stderr.decode(errors="replace")[-_LOG_TAIL_CHARS:])
    return done.stdout.decode().strip()


def _clean_env() -> dict[str, str]:
    """The environment for the tools run here, without what would point them at another
    Python (an activated virtualenv, a PYTHONHOME)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}


def _has_pip() -> bool:
    import importlib.util

    return importlib.util.find_spec("pip") is not None


def _run(cmd: list[str], what: str, timeout_s: float) -> None:
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout_s, env=_clean_env())
    except subprocess.TimeoutExpired as e:
        raise PipEnvError(f"runtime_env pip: could not {what} within {timeout_s:.0f} s") from e
    except OSError as e:
        raise PipEnvError(f"runtime_env pip: could not {what}: {e}") from e
    if done.returncode != 0:
        out = done.stdout.decode(errors="replace")[-_LOG_TAIL_CHARS:]
        raise PipEnvError(f"runtime_env pip: could not {what} (`{' '.join(cmd[:4])} ...` exited with "
                          f"{done.returncode}):\n{out}")


def activate_in_process(venv: str) -> None:
    """Make the environment's packages importable here, ahead of the base's (a worker, whose
    interpreter is the one the environment layers over: its own layer file is not run)."""
    import site

    path = site_packages(venv)
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
    with contextlib.suppress(OSError):
        known = {os.path.normcase(os.path.abspath(p)) for p in sys.path if p}
        for name in sorted(os.listdir(path)):  # .pth files of the installed packages
            if name.endswith(".pth") and name != LAYER_PTH:
                with contextlib.suppress(Exception):
                    site.addpackage(path, name, known)  # type: ignore[attr-defined]
