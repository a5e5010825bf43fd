"""One documentation page's run: its own machine, as far as the page can tell.

Each page gets a fresh working directory, its own RAYLITE_TEMP_DIR and, where Linux allows it
(root, or unprivileged user namespaces), its own network and process namespaces: so a page can
say `raylite start --head` (port 6379), `serve run` (port 8000) and open the dashboard on 8265
as a reader would, while other pages, other tests and other users of the machine use the same
ports; and every process the page started ends with it. `python`, `raylite` and `serve` on the
page's PATH are this checkout's, run by the interpreter running the tests.

Blocks run in the page's order whatever order pytest asks for them in: asking for block k runs
the blocks before it first (once), so the suite passes in random order too.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from tests.docs.blocks import Block

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.py")
BLOCK_TIMEOUT_S = 300.0
# environment that would point a page at someone else's cluster
_DROP_ENV = ("RAYLITE_ADDRESS", "RAY_ADDRESS", "RAYLITE_TOKEN", "RAY_API_SERVER_ADDRESS",
             "RAYLITE_JOB_SUBMISSION_ID", "RAYLITE_DASHBOARD_PORT", "PYTEST_CURRENT_TEST")
WRAPPERS = {"python": "exec {exe} \"$@\"", "python3": "exec {exe} \"$@\"",
            "raylite": "exec {exe} -m raylite.cli \"$@\"",
            "serve": "exec {exe} -m raylite.serve.scripts \"$@\"",
            # compat/ray's `ray` command (docs/ecosystem.md), run on this checkout's raylite
            "ray": "exec {exe} -c 'import sys, ray; sys.argv[0] = \"ray\"; ray._cli_main()' \"$@\""}


@dataclass
class Outcome:
    status: str  # "passed" | "failed" | "skipped"
    message: str = ""
    stdout: str = ""


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """`unshare` can give a page its own network and pid namespaces here."""
    if not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "-r", "-n", "-p", "-f", "--mount-proc", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class PageSession:
    """The kernel process of one page, the results of its blocks, and its clean-up."""

    def __init__(self, path: str, blocks: list[Block]) -> None:
        self.path = path
        self.blocks = blocks
        self.results: dict[int, Outcome] = {}
        self.next = 0
        self.failed_at: Block | None = None
        self.last_stdout: str | None = None
        self.proc: subprocess.Popen | None = None
        self.root = ""
        self.multinode_env: dict | None = None
        self.multinode_error = ""

    # ---- life cycle -----------------------------------------------------------------------
    def _start(self) -> None:
        # short: the page's session dirs hold unix sockets (a path limit of 107 bytes)
        self.root = tempfile.mkdtemp(prefix="rl-doc-", dir="/tmp")
        state, work, bindir = (os.path.join(self.root, d) for d in ("state", "work", "bin"))
        for d in (state, work, bindir):
            os.makedirs(d)
        for name, body in WRAPPERS.items():
            script = os.path.join(bindir, name)
            with open(script, "w") as f:
                f.write("#!/bin/sh\n" + body.format(exe=sys.executable) + "\n")
            os.chmod(script, 0o755)
        for shared in ("bench", "examples"):  # a reader's checkout has them next to the docs
            os.symlink(os.path.join(REPO, shared), os.path.join(work, shared))
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env.update({
            "PATH": bindir + os.pathsep + env.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p),
            "RAYLITE_TEMP_DIR": os.path.join(self.root, "sessions"),
            "DOCS_STATE_DIR": state, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1", "TERM": "dumb", "NO_COLOR": "1",
        })
        argv = [sys.executable, KERNEL]
        if namespaces_available():
            argv = ["unshare", "-r", "-n", "-p", "-f", "--mount-proc", "--kill-child", *argv, "--init"]
        self.proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, start_new_session=True)

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            temp_dirs = [os.path.join(self.root, "sessions"), os.path.join(self.root, "multinode")]
            with contextlib.suppress(Exception):
                self._request({"op": "stop", "temp_dirs": temp_dirs}, 120)
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(30)
        _remove_stores(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        self.proc = None

    def log_tail(self, n: int = 60) -> str:
        try:
            with open(os.path.join(self.root, "state", "page.log"), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    # ---- running blocks ---------------------------------------------------------------------
    def outcome(self, index: int) -> Outcome:
        """The outcome of block `index`, running it and every block before it first."""
        while self.next <= index:
            i = self.next
            self.next += 1
            self.results[i] = self._run_block(self.blocks[i])
        return self.results[index]

    def _run_block(self, block: Block) -> Outcome:
        if not (block.runner or block.directive or block.error):
            return Outcome("skipped", "shown, not run")  # ```text, ```yaml, ...: no test of its own
        if block.error:
            return Outcome("failed", f"{block.id}: {block.error}")
        if block.directive == "skip":
            if block.runner:
                self.last_stdout = None
            return Outcome("skipped", block.argument)
        if self.failed_at is not None:
            self.last_stdout = None
            return Outcome("skipped", f"not run: the block at {self.failed_at.id} failed")
        if block.directive == "output":
            return self._check_output(block)
        if self.proc is None:
            self._start()
        if block.directive == "file":
            answer = self._request({"op": "file", "name": block.argument, "code": block.code})
        elif block.directive == "multinode":
            env = self._multinode()
            if env is None:
                return Outcome("skipped", f"needs a multi-node cluster, which could not be started "
                                          f"here: {self.multinode_error}")
            answer = self._request({"op": "fresh", "runner": block.runner, "code": block.code,
                                    "env": env, "timeout_s": BLOCK_TIMEOUT_S})
        elif block.runner == "python":
            answer = self._request({"op": "python", "code": block.code, "path": block.path,
                                    "line": block.line})
        else:
            answer = self._request({"op": "bash", "code": block.code, "timeout_s": BLOCK_TIMEOUT_S})
        self.last_stdout = answer.get("stdout", "")
        if answer["ok"]:
            return Outcome("passed", stdout=self.last_stdout)
        self.failed_at = block
        return Outcome("failed", f"{block.id} ({block.runner or block.directive}) failed: "
                                 f"{answer.get('error', '')}\n--- output ---\n{self.last_stdout}"
                                 f"\n--- the page's log (last lines) ---\n{self.log_tail()}",
                       self.last_stdout)

    def _check_output(self, block: Block) -> Outcome:
        if self.last_stdout is None:
            return Outcome("skipped", "the block before it did not run")
        if output_matches(block.code, self.last_stdout):
            return Outcome("passed")
        return Outcome("failed", f"{block.id}: the page shows this output:\n{block.code}\n"
                                 f"but the block before it printed:\n{self.last_stdout}")

    def _multinode(self) -> dict | None:
        """A head and a second node on this machine (in the page's namespaces), started once."""
        if self.multinode_env is not None or self.multinode_error:
            return self.multinode_env
        temp = os.path.join(self.root, "multinode")
        code = f"""
export RAYLITE_TEMP_DIR={temp}
port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dash=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
raylite start --head --port=$port --dashboard-port=$dash --num-cpus=2 --node-ip-address=127.0.0.1 \
    --ray-client-server-port=0
raylite start --address=127.0.0.1:$port --num-cpus=2 --node-ip-address=127.0.0.1
echo "ADDRESS 127.0.0.1:$port"
"""
        answer = self._request({"op": "fresh", "runner": "bash", "code": code, "env": {},
                                "timeout_s": 180})
        if not answer["ok"]:
            self.multinode_error = f"{answer.get('error')}: {answer.get('stdout', '')[-2000:]}"
            return None
        address = answer["stdout"].rsplit("ADDRESS ", 1)[1].split()[0]
        self.multinode_env = {"RAYLITE_TEMP_DIR": temp, "RAYLITE_ADDRESS": address}
        return self.multinode_env

    def _request(self, req: dict, timeout_s: float = BLOCK_TIMEOUT_S + 60) -> dict:
        assert self.proc is not None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            return {"ok": False, "error": f"the page's kernel is gone ({e})"}
        line = _read_line(self.proc.stdout, timeout_s)
        if line is None:
            self.close_after_timeout()
            return {"ok": False, "error": f"no answer within {timeout_s:.0f} s (the block hangs?)"}
        return json.loads(line)

    def close_after_timeout(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _read_line(stream, timeout_s: float) -> str | None:
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        data += chunk
    return data.decode()


def output_matches(expected: str, actual: str) -> bool:
    """The page's output block against what was printed: trailing spaces and blank lines at
    the ends do not count; `...` stands for any text (also across lines)."""
    import re

    def norm(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")

    pattern = ".*?".join(re.escape(part) for part in norm(expected).split("..."))
    return re.fullmatch(pattern, norm(actual), flags=re.DOTALL) is not None


def _remove_stores(root: str) -> None:
    """Shared-memory stores of the page's clusters, if a killed node left any."""
    names = {os.path.basename(p) for p in glob.glob(os.path.join(root, "*", "session_*"))}
    for name in names:
        for store in glob.glob(f"/dev/shm/raylite_{name}_*"):
            shutil.rmtree(store, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
