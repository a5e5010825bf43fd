"""Submitted jobs: records in the head's key-value store, entrypoints supervised here.

A job's lifecycle (Ray's JobStatus):
    PENDING -> RUNNING -> (SUCCEEDED | FAILED | STOPPED);  PENDING -> (FAILED | STOPPED)

The API server process is the supervisor: it runs the entrypoint with `/bin/sh -c` in a
new session (its own process group) on the head's machine, with the job's runtime_env
applied (env_vars, working_dir unpacked from the head's package store as its cwd, and
RAYLITE_JOB_RUNTIME_ENV so the driver's `init()` ships the same env to its workers),
RAYLITE_ADDRESS / RAY_ADDRESS pointing at the cluster (so `init()` and
`init(address="auto")` join it) and the cluster token. Output (stdout and stderr) goes to
<session>/logs/job-driver-<submission id>.log. The entrypoint outlives the client that
submitted it; it dies with the supervisor (parent-death signal), and a supervisor that
starts and finds a record still PENDING or RUNNING from an earlier one marks it FAILED
(its process group is killed if it still runs), so no job stays RUNNING forever.

Records are JSON in the head's KV (namespace "_raylite_jobs"), so a head with
persistence keeps them across a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import string
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from raylite._core import protocol as P
from raylite._core.runtime_env import check as runtime_env_check
from raylite._core.runtime_env import packaging, pip_env

KV_NAMESPACE = "_raylite_jobs"
PKG_ALIAS_NAMESPACE = "_raylite_pkg_alias"  # Ray's "gcs://_ray_pkg_<hash>.zip" -> our digest
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_LOG_TAIL_CHARS = 20000
# What one job may carry: its record lives in the head's KV and every listing repeats it.
# Files belong in working_dir / py_modules (uploaded once as packages), not in env_vars.
MAX_RUNTIME_ENV_BYTES = 256 * 1024
MAX_METADATA_BYTES = 16 * 1024
MAX_ENTRYPOINT_BYTES = 128 * 1024  # exec limits one argument (`sh -c <entrypoint>`) to 128 KiB
# a submission's JSON body: room for all three above, JSON escaping included; read no further
MAX_SUBMIT_BODY_BYTES = 2 * 1024 * 1024


class JobError(Exception):
    """A request the job API refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class JobRecord:
    """What the API reports about a submitted job (Ray's JobInfo fields)."""

    submission_id: str
    entrypoint: str
    status: str = "PENDING"
    message: str = "Job has not started yet. It may be waiting for the runtime environment to be set up."
    error_type: str | None = None
    start_time: int | None = None  # ms
    end_time: int | None = None  # ms
    metadata: dict[str, str] = field(default_factory=dict)
    runtime_env: dict[str, Any] = field(default_factory=dict)
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    entrypoint_resources: dict[str, float] | None = None
    driver_agent_http_address: str | None = None
    driver_node_id: str | None = None
    driver_exit_code: int | None = None
    supervisor: str = ""  # which server instance runs it
    pid: int = 0  # the entrypoint's process (and process group)
    log_file: str = ""  # in the session that ran it (a restarted head has a new session dir)


def new_submission_id() -> str:
    alphabet = string.ascii_letters + string.digits
    return "raysubmit_" + "".join(secrets.choice(alphabet) for _ in range(16))


def log_path(logs_dir: str, submission_id: str) -> str:
    return os.path.join(logs_dir, f"job-driver-{submission_id}.log")


class JobManager:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.instance = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._stopping: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._supervising: dict[str, asyncio.Task] = {}
        os.makedirs(ctx.logs_dir, exist_ok=True)

    # ------------------------------------------------------------ records
    async def _put(self, rec: JobRecord) -> None:
        await self.ctx.head.request(P.KvPut(KV_NAMESPACE, rec.submission_id.encode(),
                                            json.dumps(asdict(rec)).encode(), True))

    async def get(self, submission_id: str) -> JobRecord | None:
        reply = await self.ctx.head.request(P.KvGet(KV_NAMESPACE, submission_id.encode()))
        if reply.value is None:
            return None
        return JobRecord(**json.loads(reply.value))

    async def list(self) -> list[JobRecord]:
        keys = (await self.ctx.head.request(P.KvKeys(KV_NAMESPACE, b""))).value or []
        out = []
        for key in keys:
            rec = await self.get(key.decode())
            if rec is not None:
                out.append(rec)
        out.sort(key=lambda r: r.start_time or 0)
        return out

    async def recover(self) -> None:
        """Records left PENDING/RUNNING by an earlier supervisor: it died, so they failed."""
        for rec in await self.list():
            if rec.status in TERMINAL or rec.supervisor == self.instance:
                continue
            if rec.pid:
                with contextlib.suppress(OSError):
                    os.killpg(rec.pid, signal.SIGKILL)
            rec.message = ("The job's supervisor (the head's API server) died while the job was "
                           f"{rec.status}; its entrypoint was stopped. Submit it again.")
            rec.status, rec.error_type = "FAILED", "JOB_SUPERVISOR_DIED"
            rec.end_time = int(time.time() * 1000)
            await self._put(rec)

    # ------------------------------------------------------------ submit
    async def submit(self, req: dict[str, Any]) -> JobRecord:
        entrypoint = req.get("entrypoint")
        if not isinstance(entrypoint, str) or not entrypoint.strip():
            raise JobError("'entrypoint' must be a non-empty shell command, e.g. \"python script.py\"")
        submission_id = req.get("submission_id") or req.get("job_id") or new_submission_id()
        if not isinstance(submission_id, str) or "/" in submission_id:
            raise JobError(f"submission_id {submission_id!r} must be a string without '/'")
        if await self.get(submission_id) is not None:
            # 500, as Ray's head answers (its agent's ValueError reaches the head as a failed
            # call): KubeRay's RayJob submitter reads exactly that as "already submitted"
            raise JobError(f"Job with submission_id {submission_id} already exists. Please use a "
                           "different submission_id.", 500)
        runtime_env = req.get("runtime_env") or {}
        metadata = req.get("metadata") or {}
        if not isinstance(runtime_env, dict):
            raise JobError(f"runtime_env must be a JSON object, not {type(runtime_env).__name__}")
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise JobError("metadata must be a JSON object of strings")
        _check_size("runtime_env", runtime_env, MAX_RUNTIME_ENV_BYTES,
                    "ship files with working_dir / py_modules (uploaded once as packages), not in env_vars")
        _check_size("metadata", metadata, MAX_METADATA_BYTES, "keep metadata to short labels")
        _check_size("entrypoint", entrypoint, MAX_ENTRYPOINT_BYTES, "put the command in a script and run that")
        try:  # the Core API's check: the same runtime_env is refused with the same words
            runtime_env_check.check(runtime_env)
        except (ValueError, TypeError) as e:
            raise JobError(str(e)) from None
        await self._check_resources(req)
        rec = JobRecord(submission_id, entrypoint, metadata=metadata, runtime_env=runtime_env,
                        entrypoint_num_cpus=req.get("entrypoint_num_cpus"),
                        entrypoint_num_gpus=req.get("entrypoint_num_gpus"),
                        entrypoint_memory=req.get("entrypoint_memory"),
                        entrypoint_resources=req.get("entrypoint_resources"),
                        start_time=int(time.time() * 1000), supervisor=self.instance,
                        log_file=log_path(self.ctx.logs_dir, submission_id),
                        driver_node_id=self.ctx.node_id, driver_agent_http_address=self.ctx.url)
        await self._put(rec)
        task = asyncio.get_running_loop().create_task(self._supervise_or_fail(rec))
        self._tasks.add(task)
        self._supervising[rec.submission_id] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t, sid=rec.submission_id: self._supervising.pop(sid, None))
        return rec

    async def _check_resources(self, req: dict[str, Any]) -> None:
        """Entrypoint resources must exist somewhere in the cluster (they are not reserved)."""
        want: dict[str, float] = dict(req.get("entrypoint_resources") or {})
        for key, name in (("entrypoint_num_cpus", "CPU"), ("entrypoint_num_gpus", "GPU")):
            value = req.get(key)
            if value is not None:
                if not isinstance(value, (int, float)) or value < 0:
                    raise JobError(f"{key} must be a number >= 0, not {value!r}")
                want[name] = value
        if not any(want.values()):
            return
        from raylite._core import resources as R

        info = await self.ctx.head.request(P.GetClusterInfo())
        for node in info.nodes:
            total = R.from_fixed(node["total"]) if node.get("alive") else {}
            if all(total.get(k, 0) >= v for k, v in want.items()):
                return
        raise JobError(f"no node of the cluster has the entrypoint's resources {want}; lower "
                       "--entrypoint-num-cpus/-gpus/-resources or add a node that has them")

    # ------------------------------------------------------------ run
    async def _supervise_or_fail(self, rec: JobRecord) -> None:
        """Whatever goes wrong while supervising, the job ends FAILED with the reason: a job
        left PENDING or RUNNING by a supervisor error would never end."""
        try:
            await self._supervise(rec)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            current = await self.get(rec.submission_id)
            if current is not None and current.status not in TERMINAL:
                await self._finish(rec, "FAILED", f"The job's supervisor failed: {type(e).__name__}: {e}",
                                   "JOB_SUPERVISOR_FAILED", None)

    async def _supervise(self, rec: JobRecord) -> None:
        path = rec.log_file or log_path(self.ctx.logs_dir, rec.submission_id)
        try:
            env, cwd = await self._prepare(rec)
        except Exception as e:  # noqa: BLE001  a bad runtime_env: the job fails, the server does not
            with open(path, "ab") as f:
                f.write(f"could not set up the job's runtime_env: {e}\n".encode())
            await self._finish(rec, "FAILED", f"Failed to set up the runtime environment: {e}",
                               "RUNTIME_ENV_SETUP_FAILED", None)
            return
        if rec.submission_id in self._stopping:
            await self._finish(rec, "STOPPED", "Job was intentionally stopped.", None, None)
            return
        try:
            with open(path, "ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    "/bin/sh", "-c", rec.entrypoint, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
                    preexec_fn=_die_with_parent)
        except OSError as e:  # E2BIG (environment too large for exec), ENOENT cwd, EMFILE, ...
            why = _start_failure(e, env, rec.entrypoint)
            with open(path, "ab") as f:
                f.write(f"could not start the job's entrypoint: {why}\n".encode())
            await self._finish(rec, "FAILED", f"Job entrypoint command could not be started: {why}",
                               "JOB_ENTRYPOINT_COMMAND_START_ERROR", None)
            return
        self._procs[rec.submission_id] = proc
        rec.status, rec.pid = "RUNNING", proc.pid
        rec.message = "Job is currently running."
        await self._put(rec)
        code = await proc.wait()
        self._procs.pop(rec.submission_id, None)
        if rec.submission_id in self._stopping:
            await self._finish(rec, "STOPPED", "Job was intentionally stopped.", None, code)
        elif code == 0:
            await self._finish(rec, "SUCCEEDED", "Job finished successfully.", None, code)
        else:
            tail = _tail(path, _LOG_TAIL_CHARS)
            how = f"exit code {code}" if code > 0 else f"signal {-code}"
            await self._finish(rec, "FAILED", f"Job entrypoint command failed with {how}, last available "
                               f"logs (truncated to {_LOG_TAIL_CHARS} chars):\n{tail}",
                               "JOB_ENTRYPOINT_COMMAND_ERROR", code)

    async def _finish(self, rec: JobRecord, status: str, message: str, error_type: str | None,
                      code: int | None) -> None:
        rec.status, rec.message, rec.error_type, rec.driver_exit_code = status, message, error_type, code
        rec.end_time = int(time.time() * 1000)
        await self._put(rec)

    async def _prepare(self, rec: JobRecord) -> tuple[dict[str, str], str | None]:
        env = dict(os.environ)
        runtime_env = dict(rec.runtime_env)
        env_vars = runtime_env.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            raise ValueError("runtime_env env_vars must map names to strings")
        env.update({str(k): str(v) for k, v in env_vars.items()})
        cwd = None
        wd = runtime_env.get("working_dir")
        if wd:
            digest = await self._digest_of(str(wd))
            reply = await self.ctx.head.request(P.KvGet(packaging.KV_NAMESPACE, digest.encode()), 120)
            if reply.value is None:
                raise ValueError(f"the working_dir package {wd} is not in the cluster; upload it again")
            cwd = packaging.unpack(reply.value, self.ctx.session_dir, digest)
            runtime_env["working_dir"] = packaging.PKG_SCHEME + digest
            env["PYTHONPATH"] = os.pathsep.join(p for p in [cwd, env.get("PYTHONPATH", "")] if p)
        _activate(env, pip_env.running_virtualenv())  # `python` is the cluster's, activated or not
        wanted = pip_env.wanted(runtime_env)
        if wanted is not None:  # the entrypoint's `python` is the environment's (built once per machine)
            rec.message = f"Job is installing its runtime_env {wanted[0]} packages."
            await self._put(rec)
            venv = await asyncio.to_thread(pip_env.ensure, os.path.dirname(self.ctx.session_dir), *wanted)
            _activate(env, venv)
        mods = runtime_env.get("py_modules") or []
        runtime_env["py_modules"] = [packaging.PKG_SCHEME + await self._digest_of(str(m)) for m in mods]
        if not runtime_env["py_modules"]:
            runtime_env.pop("py_modules")
        env.update({
            "RAYLITE_ADDRESS": self.ctx.cluster_address or self.ctx.head.address,
            "RAY_ADDRESS": self.ctx.cluster_address or self.ctx.head.address,
            "RAYLITE_TOKEN": self.ctx.token, "RAYLITE_JOB_SUBMISSION_ID": rec.submission_id,
            "RAY_JOB_SUBMISSION_ID": rec.submission_id,
            "RAYLITE_JOB_RUNTIME_ENV": json.dumps(runtime_env), "PYTHONUNBUFFERED": "1",
        })
        return env, cwd

    async def _digest_of(self, uri: str) -> str:
        if packaging.is_package_uri(uri):
            return packaging.digest_of(uri)
        name = uri.split("://", 1)[-1]
        reply = await self.ctx.head.request(P.KvGet(PKG_ALIAS_NAMESPACE, name.encode()))
        if reply.value is None:
            raise ValueError(f"working_dir / py_modules entry {uri!r} is not a package uploaded to this "
                             "cluster; pass a local directory to the job client, which uploads it")
        return reply.value.decode()

    # ------------------------------------------------------------ packages (Ray's upload protocol)
    async def package_exists(self, name: str) -> bool:
        return (await self.ctx.head.request(P.KvGet(PKG_ALIAS_NAMESPACE, name.encode()))).value is not None

    async def store_package(self, name: str, data: bytes) -> str:
        import hashlib

        if len(data) > packaging.MAX_PACKAGE_BYTES:
            raise JobError(f"the package {name} is {len(data) / 2**20:.1f} MiB, more than the "
                           f"{packaging.MAX_PACKAGE_BYTES / 2**20:.0f} MiB limit for a working_dir", 413)
        digest = hashlib.sha1(data).hexdigest()
        await self.ctx.head.request(P.KvPut(packaging.KV_NAMESPACE, digest.encode(), data, False), 120)
        await self.ctx.head.request(P.KvPut(PKG_ALIAS_NAMESPACE, name.encode(), digest.encode(), True))
        return digest

    # ------------------------------------------------------------ stop / delete
    async def stop(self, submission_id: str) -> bool:
        rec = await self._existing(submission_id)
        if rec.status in TERMINAL:
            return False
        self._stopping.add(submission_id)
        proc = self._procs.get(submission_id)
        if proc is None:
            if submission_id not in self._supervising:  # nothing here runs it: it is stopped now
                await self._finish(rec, "STOPPED", "Job was intentionally stopped.", None, None)
            return True  # not started yet: _supervise sees _stopping
        await terminate_tree(proc.pid, self.ctx.config.job_stop_grace_s, lambda: proc.returncode is not None)
        return True

    async def delete(self, submission_id: str) -> bool:
        rec = await self._existing(submission_id)
        if rec.status not in TERMINAL:
            raise JobError(f"Attempted to delete job with submission_id {submission_id}, but it is in the "
                           f"non-terminal state {rec.status}. Stop it first (raylite job stop "
                           f"{submission_id}).")
        await self.ctx.head.request(P.KvDel(KV_NAMESPACE, submission_id.encode()))
        with contextlib.suppress(OSError):
            os.remove(self.log_file(rec))
        return True

    async def _existing(self, submission_id: str) -> JobRecord:
        rec = await self.get(submission_id)
        if rec is None:
            raise JobError(f"Job {submission_id} does not exist.", 404)
        return rec

    async def shutdown(self) -> None:
        """The server stops: stop every job it runs (they would be orphans otherwise)."""
        for sid, proc in list(self._procs.items()):
            self._stopping.add(sid)
            with contextlib.suppress(Exception):
                await terminate_tree(proc.pid, 1.0, lambda p=proc: p.returncode is not None)
        for t in list(self._tasks):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 2.0)

    def log_file(self, rec: JobRecord) -> str:
        """Where the job's log is: this session's logs, else the session that ran it (a head
        restarted with --persist keeps the records, and the old session directory its logs)."""
        here = log_path(self.ctx.logs_dir, rec.submission_id)
        for path in (rec.log_file, here):
            if path and os.path.exists(path):
                return path
        import glob  # a record from before log_file was kept: look in the other sessions

        older = glob.glob(os.path.join(os.path.dirname(self.ctx.session_dir), "session_*", "logs",
                                       os.path.basename(here)))
        return max(older, key=os.path.getmtime) if older else (rec.log_file or here)

    def logs(self, rec: JobRecord) -> str:
        try:
            with open(self.log_file(rec), errors="replace") as f:
                return f.read()
        except OSError:
            return ""


async def terminate_tree(pid: int, grace_s: float, exited: Any) -> None:
    """SIGTERM the entrypoint's process group and every descendant, SIGKILL what is left after
    `grace_s` (descendants that left the group, e.g. with setsid, are found through psutil)."""
    import psutil

    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        family = []
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if exited() and not any(_alive(p) for p in family):
            return
        await asyncio.sleep(0.05)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _alive(p: Any) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _die_with_parent() -> None:
    """Runs in the entrypoint's child before exec: die with the supervisor."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, int(signal.SIGKILL), 0, 0, 0)


def _tail(path: str, chars: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _check_size(what: str, value: Any, limit: int, fix: str) -> None:
    size = len(value.encode()) if isinstance(value, str) else len(json.dumps(value))
    if size > limit:
        raise JobError(f"the job's {what} is {_human(size)}, more than the {_human(limit)} a job may carry; "
                       f"{fix}.")


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _start_failure(error: OSError, env: dict[str, str], entrypoint: str) -> str:
    """Why exec refused, in words (E2BIG names the largest variables)."""
    import errno

    if error.errno == errno.E2BIG:
        largest = sorted(env.items(), key=lambda kv: len(kv[0]) + len(kv[1]), reverse=True)[:3]
        names = ", ".join(f"{k} ({_human(len(k) + len(v))})" for k, v in largest)
        return (f"{error.strerror} (E2BIG): the environment and command line exceed what exec accepts "
                f"(one variable or argument at most 128 KiB, all together about 2 MiB); the largest "
                f"variables are {names}. Pass large data as a file in working_dir instead of env_vars.")
    return f"{type(error).__name__}: {error}"


def _activate(env: dict[str, str], venv: str | None) -> None:
    """What `. venv/bin/activate` does, for the entrypoint's environment: its ``bin`` first on
    PATH (so `python` is its interpreter) and VIRTUAL_ENV naming it."""
    if venv is None or env.get("VIRTUAL_ENV") == venv:
        return
    env["PATH"] = os.pathsep.join(p for p in [pip_env.bin_dir(venv), env.get("PATH", "")] if p)
    env["VIRTUAL_ENV"] = venv
    env.pop("PYTHONHOME", None)
