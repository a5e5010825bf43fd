"""The process that runs one documentation page's blocks (started by tests/docs/session.py).

Requests arrive on stdin, one JSON object a line; each answer leaves as one JSON line on the
protocol pipe (the original stdout, moved aside so that nothing the blocks print can corrupt
it; fds 1 and 2 go to the page's log file).

    {"op": "python", "code": ..., "path": ..., "line": N}   exec in the page's namespace
    {"op": "bash", "code": ..., "timeout_s": T}             one bash, state carried over
    {"op": "file", "name": ..., "code": ...}                write a file in the cwd
    {"op": "fresh", "runner": "python"|"bash", "code": ..., "env": {...}, "timeout_s": T}
                                                             a separate process (multinode)
    {"op": "stop"}                                          shut down what the page started

`--init` makes this process the page's pid 1 (inside `unshare --pid`): it runs the kernel as
its child and reaps every orphan (daemons started by `raylite start`), so none stays a zombie;
when it exits, the kernel kills every process left in the namespace.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import traceback

STATE_VARS = "vars.sh"  # non-exported shell variables, carried to the page's next bash block
INTERNAL = ("BASH.*|EUID|PPID|SHELLOPTS|UID|RANDOM|SECONDS|LINENO|FUNCNAME|GROUPS|PIPESTATUS|"
            "HIST.*|_|COMP.*|DIRSTACK|OPTIND|OPTARG|OPTERR|IFS|PS[0-9]|SHLVL|PWD|OLDPWD|EPOCH.*|"
            "SRANDOM|MACHTYPE|HOSTTYPE|OSTYPE|HOSTNAME|COLUMNS|LINES|__docs_.*")


class Tee(io.TextIOBase):
    """sys.stdout during a block: kept for the answer and written to the page's log."""

    def __init__(self, log) -> None:
        self.buffer_ = io.StringIO()
        self.log = log

    def write(self, s: str) -> int:
        self.buffer_.write(s)
        self.log.write(s)
        self.log.flush()
        return len(s)

    def flush(self) -> None:
        self.log.flush()

    def isatty(self) -> bool:
        return False


class Kernel:
    def __init__(self, state_dir: str, protocol) -> None:
        self.state_dir = state_dir
        self.protocol = protocol
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.log = open(os.path.join(state_dir, "page.log"), "a", buffering=1)

    # ---- python --------------------------------------------------------------------------
    def python(self, req: dict) -> dict:
        code = "\n" * req["line"] + req["code"]  # tracebacks name the page's own line numbers
        out = Tee(self.log)
        self.log.write(f"\n>>> python block at {req['path']}:{req['line']}\n")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            compiled = compile(code, req["path"], "exec")
            with contextlib.redirect_stdout(out):
                exec(compiled, self.namespace)
        except BaseException as e:  # noqa: BLE001 - reported to the test, SystemExit included
            if isinstance(e, SystemExit) and e.code in (None, 0):
                return {"ok": True, "stdout": out.buffer_.getvalue()}
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            self.log.write(text)
            return {"ok": False, "stdout": out.buffer_.getvalue(), "error": text}
        finally:
            sys.stdout.flush()
        return {"ok": True, "stdout": out.buffer_.getvalue()}

    # ---- bash ----------------------------------------------------------------------------
    def bash(self, req: dict) -> dict:
        env_file = os.path.join(self.state_dir, "env.out")
        pwd_file = os.path.join(self.state_dir, "pwd.out")
        vars_file = os.path.join(self.state_dir, STATE_VARS)
        prelude = f"""
[ -f "{vars_file}" ] && source "{vars_file}"
__docs_save() {{
    __docs_rc=$?
    pwd > "{pwd_file}"
    env -0 > "{env_file}"
    for __docs_v in $(compgen -v | grep -Ev '^({INTERNAL})$'); do
        __docs_d=$(declare -p "$__docs_v" 2>/dev/null) || continue
        __docs_f=${{__docs_d#declare -}}
        [[ ${{__docs_f%% *}} == *x* ]] || printf '%s\\n' "$__docs_d"
    done > "{vars_file}.new"
    mv "{vars_file}.new" "{vars_file}"
    exit $__docs_rc
}}
trap __docs_save EXIT
set -eo pipefail
"""
        self.log.write(f"\n$$$ bash block\n{req['code']}")
        self.log.flush()
        result = self._run(["bash", "--noprofile", "--norc", "-c", prelude + req["code"]],
                           os.environ.copy(), req.get("timeout_s", 300))
        with contextlib.suppress(OSError):
            with open(env_file, "rb") as f:
                new_env = dict(item.split("=", 1) for item in f.read().decode().split("\0") if "=" in item)
            for key in set(os.environ) - set(new_env):
                del os.environ[key]
            os.environ.update(new_env)
        with contextlib.suppress(OSError):
            with open(pwd_file) as f:
                os.chdir(f.read().strip())
        return result

    def _run(self, argv: list[str], env: dict, timeout_s: float) -> dict:
        out_path = os.path.join(self.state_dir, "block.out")
        with open(out_path, "wb") as out:  # a file, not a pipe: a background process keeps no pipe open
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
            try:
                code = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        with open(out_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        self.log.write(text)
        if code is None:
            return {"ok": False, "stdout": text, "error": f"timed out after {timeout_s} s"}
        if code != 0:
            return {"ok": False, "stdout": text, "error": f"exit status {code}"}
        return {"ok": True, "stdout": text}

    # ---- other requests ------------------------------------------------------------------
    def file(self, req: dict) -> dict:
        path = os.path.join(os.getcwd(), req["name"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(req["code"])
        return {"ok": True, "stdout": ""}

    def fresh(self, req: dict) -> dict:
        env = {**os.environ, **req["env"]}
        if req["runner"] == "python":
            argv = [sys.executable, "-c", req["code"]]
        else:
            argv = ["bash", "--noprofile", "--norc", "-c", "set -eo pipefail\n" + req["code"]]
        return self._run(argv, env, req.get("timeout_s", 300))

    def stop(self, req: dict) -> dict:
        errors = []
        try:
            if "raylite" in sys.modules:
                import raylite

                if raylite.is_initialized():
                    with contextlib.suppress(Exception):
                        if "raylite.serve" in sys.modules:
                            sys.modules["raylite.serve"].shutdown()
                    raylite.shutdown()
        except Exception as e:  # noqa: BLE001
            errors.append(f"raylite.shutdown(): {e}")
        for temp in req.get("temp_dirs", []):
            env = {**os.environ, "RAYLITE_TEMP_DIR": temp}
            self._run(["raylite", "stop"], env, 60)
        return {"ok": not errors, "stdout": "", "error": "; ".join(errors)}

    def serve_forever(self) -> None:
        for line in sys.stdin:
            req = json.loads(line)
            answer = getattr(self, req["op"])(req)
            self.protocol.write(json.dumps(answer) + "\n")
            self.protocol.flush()
            if req["op"] == "stop":
                return


def main() -> None:
    state_dir = os.environ["DOCS_STATE_DIR"]
    if sys.argv[1:] == ["--init"]:
        init(state_dir)
        return
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(os.path.join(state_dir, "page.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    Kernel(state_dir, protocol).serve_forever()


def init(state_dir: str) -> None:
    """pid 1 of the page's namespaces: run the kernel, reap orphans, exit with the kernel."""
    with contextlib.suppress(Exception):
        _loopback_up()
    kernel = subprocess.Popen([sys.executable, __file__])
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if pid == kernel.pid:
            return


def _loopback_up() -> None:
    """`ip link set lo up` in a fresh network namespace, without needing iproute2."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket() as s:
        ifr = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14s", b"lo", flags | iff_up, b"\0" * 14))


if __name__ == "__main__":
    main()
