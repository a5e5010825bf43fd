"""A raylite cluster on separate network-namespace hosts (../shared/tools/netns-hosts).

Each host runs one node, started with the real CLI inside the host; drivers run inside a
host too. Used by test_netns.py and bench/cluster.py. Needs root; `available()` says.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TOOL = os.environ.get("NETNS_HOSTS", "/work/shared/tools/netns-hosts")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def available() -> bool:
    if not os.path.exists(TOOL) or os.geteuid() != 0:
        return False
    return subprocess.run([TOOL, "check"], capture_output=True).returncode == 0


class NetnsCluster:
    """Hosts PREFIX1..PREFIXn; host 1 runs the head. Always use as a context manager."""

    def __init__(self, n_hosts: int = 3, prefix: str = "rlcl", num_cpus: int = 1) -> None:
        self.n = n_hosts
        self.prefix = prefix
        self.num_cpus = num_cpus
        self.base = tempfile.mkdtemp(prefix="rln", dir="/tmp")
        self.ips: dict[str, str] = {}
        self.token = ""
        self.address = ""

    def host(self, i: int) -> str:
        return f"{self.prefix}{i}"

    def __enter__(self) -> NetnsCluster:
        out = subprocess.run([TOOL, "up", str(self.n), "--prefix", self.prefix], capture_output=True,
                             text=True, check=True).stdout
        for line in out.split("\n"):
            if line.strip():
                name, ip = line.split()[:2]
                self.ips[name] = ip
        try:
            head_ip = self.ips[self.host(1)]
            self.address = f"{head_ip}:6379"
            self.cli(1, "start", "--head", f"--node-ip-address={head_ip}", "--port=6379",
                     f"--num-cpus={self.num_cpus}", '--resources={"h1": 1}')
            self.token = open(glob.glob(os.path.join(self.temp_dir(1), "session_*", "token"))[0]).read()
            for i in range(2, self.n + 1):
                self.start_worker(i)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def start_worker(self, i: int) -> None:
        self.cli(i, "start", f"--address={self.address}", f"--node-ip-address={self.ips[self.host(i)]}",
                 f"--num-cpus={self.num_cpus}", f'--resources={{"h{i}": 1}}', env={"RAYLITE_TOKEN": self.token})

    def __exit__(self, *exc) -> None:
        subprocess.run([TOOL, "down", "--prefix", self.prefix], capture_output=True)
        remove_stores(self.base)
        shutil.rmtree(self.base, ignore_errors=True)

    def temp_dir(self, i: int) -> str:
        return os.path.join(self.base, f"h{i}")

    def env(self, i: int, extra: dict | None = None) -> list[str]:
        env = {"RAYLITE_TEMP_DIR": self.temp_dir(i), "PYTHONPATH": REPO, **(extra or {})}
        return ["env", *[f"{k}={v}" for k, v in env.items()]]

    def exec(self, i: int, argv: list[str], env: dict | None = None, timeout_s: float = 120,
             check: bool = True) -> subprocess.CompletedProcess:
        cmd = [TOOL, "exec", self.host(i), "--", *self.env(i, env), *argv]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} on {self.host(i)} failed:\n{res.stdout}\n{res.stderr}")
        return res

    def cli(self, i: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.exec(i, [sys.executable, "-m", "raylite.cli", *args], env)

    def driver(self, i: int, code: str, timeout_s: float = 120) -> dict:
        """Run a driver script on host i; the last JSON line it prints is returned here (the
        cluster's log lines forwarded to the driver, e.g. at shutdown, may come after it)."""
        res = self.exec(i, [sys.executable, "-c", code], {"RAYLITE_ADDRESS": self.address,
                                                          "RAYLITE_TOKEN": self.token}, timeout_s)
        for line in reversed(res.stdout.strip().splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        raise AssertionError(f"the driver printed no JSON line:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")

    def start_driver(self, i: int, code: str) -> subprocess.Popen:
        cmd = [TOOL, "exec", self.host(i), "--", *self.env(i, {"RAYLITE_ADDRESS": self.address,
                                                                "RAYLITE_TOKEN": self.token}),
               sys.executable, "-u", "-c", code]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)


    def cut(self, i: int) -> None:
        subprocess.run([TOOL, "cut", self.host(i)], check=True, capture_output=True)

    def heal(self, i: int) -> None:
        subprocess.run([TOOL, "heal", self.host(i)], check=True, capture_output=True)

    def kill(self, i: int) -> None:
        subprocess.run([TOOL, "kill", self.host(i)], check=True, capture_output=True)


def read_json_lines(proc: subprocess.Popen, until_key: str, timeout_s: float) -> dict:
    """Read a driver's stdout until a JSON line with `until_key` appears."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        with contextlib.suppress(ValueError):
            d = json.loads(line)
            if until_key in d:
                return d
    raise AssertionError(f"driver never printed {until_key!r}; stderr:\n{proc.stderr.read()[-3000:]}")


def go(proc: subprocess.Popen) -> None:
    """Tell a waiting driver (blocked in input()) the wall-clock time the fault happened."""
    proc.stdin.write(f"{time.time()}\n")
    proc.stdin.flush()


def remove_stores(base: str) -> None:
    """Killed hosts leave their nodes' shared-memory stores (named after the session) behind."""
    for session in glob.glob(os.path.join(base, "*", "session_*")):
        for path in glob.glob(f"/dev/shm/raylite_{os.path.basename(session)}_*"):
            shutil.rmtree(path, ignore_errors=True)
