"""Pods without Kubernetes: each pod is a network-namespace host (shared/tools/netns-hosts) with
a container-like view of the filesystem made in a private mount namespace (`unshare -m`):

- /etc/hosts: the pod's own (its host name, and the head service's DNS name -> the head's IP,
  as cluster DNS would answer), bind-mounted inside the namespace, never the machine's file;
- /tmp: a directory of the pod's own (Ray's and raylite's session files, HOME);
- /dev/shm: a private tmpfs (KubeRay mounts an emptyDir there);
- /usr/local/sbin: the "image's" commands, `ray` and `python3`, first on a login shell's PATH.

A container runs as KubeRay runs it: `/bin/bash -lc -- <args>` with only the pod spec's
environment. The `ray` command is compat/ray's when this tree has it (its `ray:_cli_main`),
else raylite's CLI under that name.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("NETNS_HOSTS", os.path.join(os.path.dirname(REPO), "shared", "tools", "netns-hosts"))
COMPAT_SRC = os.path.join(REPO, "compat", "ray", "src")


def nh(*args: str, timeout: float = 60) -> str:
    return subprocess.run([TOOL, *args], check=True, text=True, capture_output=True, timeout=timeout).stdout.strip()


def uses_compat_ray() -> bool:
    return os.path.exists(os.path.join(COMPAT_SRC, "ray", "__init__.py"))


def write_image_bin(path: str) -> None:
    """The `ray` and `python3` commands of the pod's "image"."""
    os.makedirs(path, exist_ok=True)
    py = sys.executable
    if uses_compat_ray():
        ray = f'exec {py} -c "import sys, ray; sys.argv[0] = \'ray\'; sys.exit(ray._cli_main())" "$@"\n'
    else:
        ray = f'exec {py} -m raylite.cli "$@"\n'
    for name, body in (("ray", ray), ("python3", f'exec {py} "$@"\n'), ("python", f'exec {py} "$@"\n')):
        p = os.path.join(path, name)
        with open(p, "w") as f:
            f.write("#!/bin/bash\n" + body)
        os.chmod(p, 0o755)


@dataclass
class Pod:
    name: str
    host: str  # the netns host it runs on
    ip: str
    root: str  # its private files on the machine (/tmp, /etc/hosts, the image's bin)
    hosts_entries: dict[str, str] = field(default_factory=dict)  # name -> IP, besides its own
    procs: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        for d in ("tmp", "bin"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        os.chmod(os.path.join(self.root, "tmp"), 0o1777)
        write_image_bin(os.path.join(self.root, "bin"))
        self.write_hosts()

    @property
    def hosts_file(self) -> str:
        return os.path.join(self.root, "hosts")

    @property
    def tmp(self) -> str:
        return os.path.join(self.root, "tmp")

    def write_hosts(self) -> None:
        """(Re)write the pod's /etc/hosts in place: a running pod sees the change, as it would
        see a DNS answer change."""
        lines = ["127.0.0.1\tlocalhost", f"{self.ip}\t{self.host}"]
        lines += [f"{ip}\t{name} {name.split('.')[0]}" for name, ip in self.hosts_entries.items()]
        with open(self.hosts_file, "r+" if os.path.exists(self.hosts_file) else "w") as f:
            f.seek(0)
            f.write("\n".join(lines) + "\n")
            f.truncate()

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp/home",
                "HOSTNAME": self.host, "LANG": "C.UTF-8",
                "PYTHONPATH": os.pathsep.join(p for p in (COMPAT_SRC if uses_compat_ray() else "", REPO) if p)}
        if extra.get("PYTHONPATH"):  # the image's own paths come after the pod spec's
            extra = {**extra, "PYTHONPATH": extra["PYTHONPATH"] + os.pathsep + base["PYTHONPATH"]}
        return {**base, **extra}

    def _argv(self, shell_args: str, login: bool = True) -> list[str]:
        mounts = (f"mount --bind {shlex.quote(self.hosts_file)} /etc/hosts && "
                  f"mount --bind {shlex.quote(os.path.join(self.root, 'bin'))} /usr/local/sbin && "
                  f"mount --bind {shlex.quote(self.tmp)} /tmp && "
                  "mount -t tmpfs -o size=4g,mode=1777 shm /dev/shm && mkdir -p /tmp/home && cd /tmp && ")
        shell = "/bin/bash -lc --" if login else "/bin/bash -c --"
        inner = mounts + f"exec {shell} {shlex.quote(shell_args)}"
        return [TOOL, "exec", self.host, "--", "unshare", "-m", "--propagation", "private", "/bin/bash", "-c", inner]

    def start(self, shell_args: str, env: dict[str, str], log_name: str) -> subprocess.Popen:
        """Run a container's command in the pod (in the background), its output in a log file."""
        log = open(os.path.join(self.root, log_name), "ab")
        p = subprocess.Popen(self._argv(shell_args), env=self.env(env), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def run(self, shell_args: str, env: dict[str, str] | None = None, timeout: float = 120,
            login: bool = True) -> subprocess.CompletedProcess:
        """Run a command to completion in the pod (an init container, a probe, kubectl exec)."""
        return subprocess.run(self._argv(shell_args, login), env=self.env(env or {}), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def probe(self, command: str) -> bool:
        """An exec probe: `bash -c <command>` in the pod, exit 0 = pass (kubelet runs it so)."""
        try:
            return self.run(command, timeout=15, login=False).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def log(self, log_name: str) -> str:
        with contextlib.suppress(OSError):
            with open(os.path.join(self.root, log_name), errors="replace") as f:
                return f.read()
        return ""

    def kill(self) -> None:
        """The pod dies at once (every process of its host gets SIGKILL)."""
        nh("kill", self.host)
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(10)
        self.procs = []

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        nh("kill", self.host, "TERM")
        deadline = time.monotonic() + 10
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(max(0.1, deadline - time.monotonic()))
        nh("kill", self.host)
        self.procs = []


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
