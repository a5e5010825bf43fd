"""`raylite job submit|status|logs|stop|delete|list`: Ray's job CLI over the head's HTTP API."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import Any

import click

from raylite.cli.table import format_time_ms

_ADDRESS_HELP = ("The cluster's API address, e.g. http://127.0.0.1:8265 (default: RAY_ADDRESS, the "
                 "cluster running on this machine, or http://127.0.0.1:8265).")


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def _client(address: str | None, headers: str | None = None) -> Any:
    from raylite.job_submission import JobSubmissionClient

    extra = _json_arg(headers, "--headers", dict) if headers else None
    try:
        return JobSubmissionClient(address, headers=extra)
    except (ConnectionError, PermissionError, RuntimeError) as e:
        _fail(str(e))


def _json_arg(text: str, flag: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except ValueError as e:
        _fail(f"{flag} is not valid JSON ({e}): {text!r}")
    if not isinstance(value, kind):
        _fail(f"{flag} must be a JSON {'object' if kind is dict else kind.__name__}, not {text!r}")
    return value


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (RuntimeError, ConnectionError, PermissionError, ValueError) as e:
        _fail(str(e))


@click.group()
def job() -> None:
    """Submit, follow and manage jobs on a cluster."""


@job.command(context_settings={"ignore_unknown_options": True})
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--submission-id", "--job-id", "submission_id", default=None, help="Submission id (default: generated).")
@click.option("--working-dir", default=None, help="Local directory uploaded and used as the job's cwd.")
@click.option("--runtime-env", default=None, help="Path to a YAML file with the runtime_env.")
@click.option("--runtime-env-json", default=None, help="runtime_env as a JSON object.")
@click.option("--metadata-json", default=None, help="Metadata as a JSON object of strings.")
@click.option("--entrypoint-num-cpus", type=float, default=None, help="CPUs the entrypoint needs.")
@click.option("--entrypoint-num-gpus", type=float, default=None, help="GPUs the entrypoint needs.")
@click.option("--entrypoint-memory", type=int, default=None, help="Memory (bytes) the entrypoint needs.")
@click.option("--entrypoint-resources", default=None, help="Custom resources as a JSON object.")
@click.option("--no-wait", is_flag=True, help="Return after submitting instead of following the logs.")
@click.option("--headers", default=None, help="Extra HTTP headers as a JSON object.")
@click.argument("entrypoint", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(address: str | None, submission_id: str | None, working_dir: str | None, runtime_env: str | None,
           runtime_env_json: str | None, metadata_json: str | None, entrypoint_num_cpus: float | None,
           entrypoint_num_gpus: float | None, entrypoint_memory: int | None, entrypoint_resources: str | None,
           no_wait: bool, headers: str | None, entrypoint: tuple[str, ...]) -> None:
    """Submit a job: raylite job submit [options] -- python script.py"""
    env: dict[str, Any] = {}
    if runtime_env:
        env = _load_yaml(runtime_env)
    if runtime_env_json:
        env.update(_json_arg(runtime_env_json, "--runtime-env-json", dict))
    if working_dir:
        env["working_dir"] = working_dir
    metadata = _json_arg(metadata_json, "--metadata-json", dict) if metadata_json else None
    resources = _json_arg(entrypoint_resources, "--entrypoint-resources", dict) if entrypoint_resources else None
    client = _client(address, headers)
    sid = _call(lambda: client.submit_job(
        entrypoint=_entrypoint(entrypoint), submission_id=submission_id, runtime_env=env or None,
        metadata=metadata, entrypoint_num_cpus=entrypoint_num_cpus, entrypoint_num_gpus=entrypoint_num_gpus,
        entrypoint_memory=entrypoint_memory, entrypoint_resources=resources))
    click.echo(f"Job '{sid}' submitted successfully")
    if no_wait:
        click.echo(f"  Query its status:  raylite job status {sid}\n"
                   f"  Follow its logs:   raylite job logs {sid} --follow\n"
                   f"  Stop it:           raylite job stop {sid}")
        return
    _follow(client, sid)
    _exit_with_status(client, sid)


def _entrypoint(argv: tuple[str, ...] | list[str]) -> str:
    """The shell command of `raylite job submit -- ARGV...`: several arguments are quoted as the
    shell gave them (`-- python -c "import os; print(1)"`), as Ray's CLI does; one argument is
    taken as a command line (`-- "python a.py && python b.py"`)."""
    import shlex

    return argv[0] if len(argv) == 1 else shlex.join(argv)


def _load_yaml(path: str) -> dict[str, Any]:
    try:
        import yaml

        with open(path) as f:
            data = yaml.safe_load(f)
    except Exception as e:  # noqa: BLE001
        _fail(f"--runtime-env {path!r} could not be read as YAML: {e}")
    if not isinstance(data, dict):
        _fail(f"--runtime-env {path!r} must hold a mapping")
    return data


def _follow(client: Any, sid: str) -> None:
    """Print the job's output until it ends; Ctrl-C stops the following, not the job.

    Ctrl-C is caught by a handler of this loop, not by asyncio.run's cancel-the-main-task:
    the stream's task is cancelled and given 2 s to close, and the command exits either way.
    (Once in CI, under load, Ctrl-C left the command following for over a minute: a library
    that swallows a cancellation must not keep the user's terminal.)
    """
    async def stream() -> None:
        async for chunk in client.tail_job_logs(sid):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    async def run() -> bool:  # True when Ctrl-C ended it
        loop = asyncio.get_running_loop()
        interrupted = loop.create_future()
        loop.add_signal_handler(signal.SIGINT, lambda: interrupted.done() or interrupted.set_result(None))
        task = asyncio.ensure_future(stream())
        try:
            await asyncio.wait({task, interrupted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        if task.done():
            task.result()  # the stream's own error (a RuntimeError naming it), if any
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=2.0)
        return True

    loop = asyncio.new_event_loop()
    try:
        interrupted = loop.run_until_complete(run())
    except RuntimeError as e:
        _fail(str(e))
    except KeyboardInterrupt:  # a Ctrl-C before the loop's handler was in place
        interrupted = True
    if interrupted:  # say the job goes on, and how to go on
        ctx = click.get_current_context(silent=True)
        cmd = "ray" if ctx is not None and ctx.find_root().info_name == "ray" else "raylite"
        click.echo(f"\nStopped following job '{sid}'; it keeps running. Stop it with `{cmd} job stop "
                   f"{sid}`, follow it again with `{cmd} job logs {sid} --follow`.", err=True)
        sys.exit(130)
    loop.close()


def _exit_with_status(client: Any, sid: str) -> None:
    deadline = time.monotonic() + 10
    info = _call(client.get_job_info, sid)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.1)
        info = _call(client.get_job_info, sid)
    words = {"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "was stopped"}
    click.echo(f"Job '{sid}' {words.get(info.status.value, info.status.value)}")
    if info.status.value == "FAILED":
        click.echo(info.message or "", err=True)
        sys.exit(1)


@job.command()
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.argument("job_id")
def status(address: str | None, job_id: str) -> None:
    """Print a job's status and message."""
    info = _call(_client(address).get_job_info, job_id)
    click.echo(f"Status for job '{job_id}': {info.status.value}")
    if info.message:
        click.echo(f"Status message: {info.message}")


@job.command()
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.argument("job_id")
def logs(address: str | None, follow: bool, job_id: str) -> None:
    """Print a job's output (stdout and stderr of its entrypoint)."""
    client = _client(address)
    if follow:
        _call(client.get_job_info, job_id)  # an unknown id is a clear error, not a silent stream
        _follow(client, job_id)
    else:
        click.echo(_call(client.get_job_logs, job_id), nl=False)


@job.command()
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--no-wait", is_flag=True, help="Do not wait for the job to end.")
@click.argument("job_id")
def stop(address: str | None, no_wait: bool, job_id: str) -> None:
    """Stop a job (SIGTERM to its process tree, SIGKILL after a grace period)."""
    client = _client(address)
    stopped = _call(client.stop_job, job_id)
    click.echo(f"Job '{job_id}' {'is stopping' if stopped else 'had already ended'}")
    if stopped and not no_wait:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _call(client.get_job_status, job_id).is_terminal():
            time.sleep(0.1)
        click.echo(f"Job '{job_id}' status: {_call(client.get_job_status, job_id).value}")


@job.command()
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.argument("job_id")
def delete(address: str | None, job_id: str) -> None:
    """Delete an ended job's record and logs."""
    _call(_client(address).delete_job, job_id)
    click.echo(f"Job '{job_id}' deleted successfully")


@job.command(name="list")
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_(address: str | None, fmt: str) -> None:
    """List the cluster's jobs (submitted jobs and drivers)."""
    import dataclasses

    jobs = _call(_client(address).list_jobs)
    if fmt == "json":
        click.echo(json.dumps([dataclasses.asdict(j) for j in jobs], indent=2, default=str))
        return
    rows = [[j.submission_id or "-", j.job_id or "-", j.type.value, j.status.value,
             _when(j.start_time), (j.entrypoint or "")[:60]] for j in jobs]
    from raylite.cli.table import format_table

    click.echo(format_table(["SUBMISSION_ID", "JOB_ID", "TYPE", "STATUS", "START_TIME", "ENTRYPOINT"], rows))


def _when(ms: int | None) -> str:
    return format_time_ms(ms)
