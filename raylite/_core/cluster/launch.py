"""Start the local cluster's daemon process, early and cheaply.

`init()` spends most of its time waiting: for a fresh interpreter to import the node
daemon, and for the driver to import its own client (asyncio, the protocol, the
serializer). This module needs none of those, so `raylite.init` spawns the daemon here
first and the two start-ups overlap; the driver then adopts the process it started
(`take_prestarted`), or spawns one now if the arguments turned out different.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from raylite._core import accelerators
from raylite._core import resources as R
from raylite._core.cluster import files as CF
from raylite._core.config import Config, system_config_env
from raylite._core.private_paths import owned_dir

# Libraries slow to import that workers almost surely need when the driver already uses them.
_PRELOADABLE = ("torch", "pyarrow", "pandas")


@dataclass
class NodeProcess:
    """A daemon spawned for a local cluster, not yet known to be ready."""

    key: tuple
    session_dir: str
    token: str
    process: subprocess.Popen
    stderr_path: str
    sys_path: tuple[str, ...] = ()  # the driver's directories its workers import from (PYTHONPATH)


def json_argument(value: Any, session: str, name: str) -> str:
    """`value` as a daemon's JSON argument. Past 16 KiB (10,000 custom resources, say) it goes
    to a file in the session directory, passed as "@<path>" (daemon.py reads it back): one argument may not exceed 128 KiB
    on Linux, and a longer one fails the start with "Argument list too long"."""
    text = json.dumps(value)
    if len(text) <= 16 * 1024:
        return text
    path = os.path.join(session, f"{name}-{secrets.token_hex(4)}.json")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return "@" + path


def daemon_command() -> list[str]:
    """How to start a node daemon: this interpreter with the site flags it was started with
    (`python -s` or `-S`, as Ray's workers inherit them), so the daemon, the workers' template
    it forks and every worker see the same packages as the driver."""
    flags = (["-S"] if sys.flags.no_site else []) + (["-s"] if sys.flags.no_user_site else [])
    return [sys.executable, *flags, "-m", "raylite._core.cluster.daemon"]


def package_root_path() -> list[str]:
    """raylite's package root for a child interpreter's PYTHONPATH, where that interpreter would
    not find raylite by itself (a source checkout run in place). Installed into site-packages,
    it is found anyway, and that folder on PYTHONPATH would come before a job environment's own
    packages (runtime_env pip) in every process started with it."""
    from raylite._core.runtime_env.pip_env import base_site_dirs

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    real = os.path.realpath(root)
    if any(os.path.realpath(d) == real for d in base_site_dirs()):
        return []
    return [root]


def driver_sys_path(has_working_dir: bool = False) -> list[str]:
    """The directories a driver's workers import its own modules from, as in Ray: the script's
    directory (when the script runs with it on sys.path, as `python path/main.py` does), and
    the working directory unless the job ships a working_dir. Meaningful on this machine only:
    another machine has these paths only if its files are laid out the same way."""
    paths: list[str] = []
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and argv0 not in ("-c", "-m", "-") and os.path.isfile(argv0):
        script_dir = os.path.dirname(os.path.realpath(argv0))
        if script_dir in (os.path.realpath(p) for p in sys.path if p):
            paths.append(script_dir)
    if not has_working_dir:
        with contextlib.suppress(OSError):  # a removed working directory
            cwd = os.path.abspath(os.getcwd())
            if cwd not in paths:
                paths.append(cwd)
    return paths


def detect_resources(num_cpus: float | None, num_gpus: float | None, resources: dict | None,
                     memory: float | None = None) -> dict[str, int]:
    """A node's resources: what was asked for, else what the machine has (accelerator types too)."""
    cpus = (os.cpu_count() or 1) if num_cpus is None else num_cpus
    gpus = _detect_gpus() if num_gpus is None else num_gpus
    total: dict[str, float] = {"CPU": cpus}
    if gpus:
        total["GPU"] = gpus
    total["memory"] = memory if memory is not None else _physical_memory() * 0.7
    if not any(k.startswith(accelerators.RESOURCE_PREFIX) for k in (resources or {})):
        total.update(_accelerator_types(gpus))
    for k, v in (resources or {}).items():
        total[k] = v
    if total.get("neuron_cores"):  # as Ray: a node with neuron cores is of their type
        total.setdefault(accelerators.RESOURCE_PREFIX + "aws-neuron-core", 1)
    total["node:__internal_head__"] = 1
    return R.to_fixed(total)


def _physical_memory() -> int:
    """The machine's memory in bytes (MemTotal, as psutil reports it), without importing psutil
    on the driver's init() path (it costs ~14 ms)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        import psutil

        return int(psutil.virtual_memory().total)


def _detect_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    with contextlib.suppress(Exception):
        found = len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
        if found:
            return found
    # a container can see its GPUs through the driver without /dev/nvidiaN names
    return accelerators.probe().gpu_count if shutil.which("nvidia-smi") else 0


def _accelerator_types(gpus: float) -> dict[str, float]:
    """`accelerator_type:<TYPE>` resources for this machine's accelerators (none without GPUs,
    except a TPU host, which says its type in the environment)."""
    if gpus:
        return accelerators.node_type_resources(accelerators.probe().type_names)
    return accelerators.node_type_resources(accelerators.tpu_type_names(os.environ))


# raylite's own libraries whose worker-side modules every fresh worker of theirs imports (a
# Train worker group is new actors each fit(): importing raylite.train there costs ~0.1-0.2 s
# per worker, paid before the first step): preloaded when the driver uses the library
_LIBRARY_WORKER_MODULES = {
    "raylite.train": ("raylite.train._internal.worker",),
    "raylite.train.torch": ("raylite.train.torch",),
    "raylite.data": ("raylite.data._internal.tasks",),
}


def heavy_modules_in_use() -> list[str]:
    names = [name for name in _PRELOADABLE if name in sys.modules]
    if "torch" in names:  # DDP's constructor imports torch._dynamo: seconds per fresh worker
        names.append("torch._dynamo")
    for library, modules in _LIBRARY_WORKER_MODULES.items():
        if library in sys.modules:
            names += modules
    return names


def node_key(num_cpus, num_gpus, resources, object_store_memory, labels, dashboard=None,
             system_config=None) -> tuple:
    """What a local daemon is started with; a prestarted one is used only if this matches."""
    return (num_cpus, num_gpus, json.dumps(resources or {}, sort_keys=True, default=str),
            object_store_memory, json.dumps(labels or {}, sort_keys=True, default=str), dashboard,
            json.dumps(system_config or {}, sort_keys=True, default=str))


def dashboard_args(config: Config, include_dashboard, dashboard_host, dashboard_port) -> tuple:
    """(host, port, fallback) of a local cluster's API server, or () when it is off.

    As in Ray, the default port falls back to a free one (with a warning) when taken; a
    port the caller chose is an error naming dashboard_port=.
    """
    if include_dashboard is False or (include_dashboard is None and not config.include_dashboard):
        return ()
    port = config.dashboard_port if dashboard_port is None else int(dashboard_port)
    return (dashboard_host or config.dashboard_host, port, dashboard_port is None)


def spawn_node(config: Config, *, num_cpus=None, num_gpus=None, resources=None,
               object_store_memory=None, labels=None, dashboard: tuple = (),
               system_config: dict | None = None) -> NodeProcess:
    base = owned_dir(config.temp_dir, private=False)
    session = owned_dir(os.path.join(
        base, f"session_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}_{secrets.token_hex(2)}"))
    CF.private_dir(os.path.join(session, "sockets"))
    os.makedirs(os.path.join(session, "logs"), exist_ok=True)
    token = secrets.token_hex(16)
    with open(os.open(os.path.join(session, "token"), os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:
        f.write(token)
    total = detect_resources(num_cpus, num_gpus, resources)
    env = dict(os.environ)
    env["RAYLITE_TOKEN"] = token
    env["RAYLITE_PRELOAD_MODULES"] = config.preload_modules or ",".join(heavy_modules_in_use())
    if object_store_memory:
        env["RAYLITE_OBJECT_STORE_BYTES"] = str(int(object_store_memory))
    env.update(system_config_env(system_config)[0])  # Ray's init(_system_config=...)
    code = tuple(driver_sys_path())  # the workers import the driver's modules beside its script
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*package_root_path(), *code, env.get("PYTHONPATH", "")] if p)
    cmd = [*daemon_command(), "--session-dir", session, "--head",
           "--resources", json_argument(total, session, "resources"),
           "--labels", json_argument(labels or {}, session, "labels"), "--exit-with-creator",
           "--creator-pid", str(os.getpid())]
    if dashboard:
        host, port, fallback = dashboard
        cmd += ["--dashboard-host", host, "--dashboard-port", str(port), "--dashboard-flag", "dashboard_port="]
        if fallback:
            cmd.append("--dashboard-fallback")
    stderr_path = os.path.join(session, "logs", "node.err")
    with open(stderr_path, "wb") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, close_fds=True)
    key = node_key(num_cpus, num_gpus, resources, object_store_memory, labels, dashboard, system_config)
    return NodeProcess(key, session, token, proc, stderr_path, code)


def wait_ready(node: NodeProcess) -> dict:
    """Block until the daemon prints READY; returns what it announced."""
    line = node.process.stdout.readline().decode()
    if line.startswith("ERROR "):  # the daemon said why it cannot run
        discard(node)
        raise RuntimeError(f"the local raylite node could not start: {line[len('ERROR '):].strip()}")
    if not line.startswith("READY "):
        discard(node)
        err = ""
        with contextlib.suppress(Exception):
            err = open(node.stderr_path).read()[-4000:]
        raise RuntimeError(f"the local raylite node failed to start:\n{err or line}")
    node.process.stdout.close()
    return json.loads(line[len("READY "):])


def discard(node: NodeProcess) -> None:
    import shutil

    with contextlib.suppress(Exception):
        node.process.kill()
        node.process.wait(2)
    shutil.rmtree(node.session_dir, ignore_errors=True)


_prestarted: NodeProcess | None = None


def prestart(address: str | None, kwargs: dict) -> None:
    """Spawn the daemon that init(**kwargs) is about to need, if it will start a local one."""
    global _prestarted
    if _prestarted is not None or address not in (None, "", "local"):
        return
    from raylite._core.cluster.files import running_cluster_address
    from raylite._core.config import env_address, get_config

    if env_address():
        return

    if address is None and running_cluster_address(get_config().temp_dir):
        return  # init() joins the cluster `raylite start` left running here
    rt = sys.modules.get("raylite._core.runtime")
    if rt is not None and (rt.client() is not None or rt.is_worker()):
        return  # already initialized, or inside a worker: init() will not start a node
    resources = kwargs.get("resources")
    if resources and ("CPU" in resources or "GPU" in resources):
        return  # init() rejects this; do not start anything

    try:
        config = get_config()
        dashboard = dashboard_args(config, kwargs.get("include_dashboard"), kwargs.get("dashboard_host"),
                                   kwargs.get("dashboard_port"))
        _prestarted = spawn_node(config, num_cpus=kwargs.get("num_cpus"), num_gpus=kwargs.get("num_gpus"),
                                 resources=resources, object_store_memory=kwargs.get("object_store_memory"),
                                 labels=kwargs.get("labels"), dashboard=dashboard,
                                 system_config=kwargs.get("_system_config"))
    except Exception:  # noqa: BLE001  init() will try again and report the error itself
        _prestarted = None


def take_prestarted(key: tuple) -> NodeProcess | None:
    """The prestarted daemon if it was started with `key`; a mismatched one is stopped."""
    global _prestarted
    node, _prestarted = _prestarted, None
    if node is not None and node.key != key:
        discard(node)
        return None
    return node


def drop_prestarted() -> None:
    """init() failed before adopting the daemon: stop it and remove its session dir."""
    take_prestarted(())  # no real key matches (): the daemon is stopped
