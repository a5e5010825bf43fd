"""raylite.job_submission: Ray's Job Submission SDK against the head's HTTP API.

    from raylite.job_submission import JobSubmissionClient, JobStatus
    client = JobSubmissionClient("http://127.0.0.1:8265")
    sid = client.submit_job(entrypoint="python train.py", runtime_env={"working_dir": "./"})
    client.get_job_status(sid)          # JobStatus.RUNNING ...
    async for lines in client.tail_job_logs(sid): print(lines, end="")

The server speaks Ray's REST shapes, so Ray's own client works against raylite too (pass the
cluster token with headers={"Authorization": "Bearer <token>"}); this client finds the
token itself (see raylite/dashboard/client.py).
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

__all__ = ["JobDetails", "JobInfo", "JobStatus", "JobSubmissionClient", "JobType"]


class JobStatus(str, enum.Enum):
    """PENDING -> RUNNING -> (SUCCEEDED | FAILED | STOPPED); PENDING -> (FAILED | STOPPED)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return f"{self.value}"

    def is_terminal(self) -> bool:
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobType(str, enum.Enum):
    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


@dataclass
class JobInfo:
    status: JobStatus
    entrypoint: str
    message: str | None = None
    error_type: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    metadata: dict[str, str] | None = None
    runtime_env: dict[str, Any] | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    entrypoint_resources: dict[str, float] | None = None
    driver_agent_http_address: str | None = None
    driver_node_id: str | None = None
    driver_exit_code: int | None = None


@dataclass
class JobDetails(JobInfo):
    """A job as the API lists it (Ray's JobDetails fields)."""

    type: JobType = JobType.SUBMISSION
    job_id: str | None = None
    submission_id: str | None = None
    driver_info: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobDetails:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["status"] = JobStatus(kwargs["status"])
        kwargs["type"] = JobType(kwargs.get("type") or "SUBMISSION")
        return cls(**kwargs)


class JobSubmissionClient:
    """Submit and manage jobs on a raylite (or Ray) cluster through its HTTP API."""

    def __init__(self, address: str | None = None, create_cluster_if_needed: bool = False,
                 cookies: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
                 headers: dict[str, Any] | None = None, verify: str | bool | None = True) -> None:
        from raylite.dashboard.client import ApiClient

        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a string, got {type(address)}")
        self._api = ApiClient(address, headers=headers, verify=verify if verify is not None else True,
                              cookies=cookies)
        self._default_metadata = dict(metadata or {})
        self._address = self._api.url
        self._api.json("GET", "/api/version")  # fail now if there is no server or no token

    # ------------------------------------------------------------ submit
    def submit_job(self, *, entrypoint: str, job_id: str | None = None, runtime_env: dict[str, Any] | None = None,
                   metadata: dict[str, str] | None = None, submission_id: str | None = None,
                   entrypoint_num_cpus: int | float | None = None,
                   entrypoint_num_gpus: int | float | None = None, entrypoint_memory: int | None = None,
                   entrypoint_resources: dict[str, float] | None = None,
                   entrypoint_label_selector: dict[str, str] | None = None) -> str:
        """Start `entrypoint` (a shell command) on the head; returns its submission id.
        (The entrypoint always runs on the head node; a label selector is recorded, not used.)"""
        runtime_env = self._upload_local_dirs(dict(runtime_env or {}))
        body = {"entrypoint": entrypoint, "submission_id": submission_id or job_id,
                "runtime_env": runtime_env, "metadata": {**self._default_metadata, **(metadata or {})},
                "entrypoint_num_cpus": entrypoint_num_cpus, "entrypoint_num_gpus": entrypoint_num_gpus,
                "entrypoint_memory": entrypoint_memory, "entrypoint_resources": entrypoint_resources,
                "entrypoint_label_selector": entrypoint_label_selector}
        body = {k: v for k, v in body.items() if v is not None}
        return self._api.json("POST", "/api/jobs/", json=body)["submission_id"]

    def _upload_local_dirs(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """A local working_dir / py_modules entry is zipped here and uploaded (Ray's protocol)."""
        wd = runtime_env.get("working_dir")
        if wd and "://" not in str(wd):
            runtime_env["working_dir"] = self._upload(str(wd), runtime_env.get("excludes") or [])
        mods = runtime_env.get("py_modules")
        if mods:
            runtime_env["py_modules"] = [m if "://" in str(m) else self._upload(str(m), [], module=True)
                                         for m in mods]
        return runtime_env

    def _upload(self, path: str, excludes: list[str], module: bool = False) -> str:
        from raylite._core.runtime_env import packaging

        path = os.path.abspath(os.path.expanduser(path))
        if os.path.isdir(path):
            prefix = os.path.basename(path.rstrip("/")) if module else ""
            digest, data = packaging.package_directory(path, excludes, max_bytes=packaging.MAX_PACKAGE_BYTES,
                                                       prefix=prefix)
        elif os.path.isfile(path) and path.endswith(".zip"):
            digest, data = packaging.package_zip_file(path)
        elif os.path.isfile(path) and path.endswith(".py") and module:
            digest, data = packaging.package_module_file(path)
        else:
            raise ValueError(f"runtime_env working_dir {path!r} is not a local directory or .zip file")
        name = f"_ray_pkg_{digest}.zip"
        if self._api.request("GET", f"/api/packages/gcs/{name}").status_code != 200:
            r = self._api.request("PUT", f"/api/packages/gcs/{name}", content=data)
            if r.status_code >= 400:
                raise RuntimeError(f"uploading the working_dir {path!r} failed ({r.status_code}): {r.text}")
        return f"gcs://{name}"

    # ------------------------------------------------------------ query
    def get_job_info(self, job_id: str) -> JobDetails:
        return JobDetails.from_json(self._api.json("GET", f"/api/jobs/{job_id}"))

    def get_job_status(self, job_id: str) -> JobStatus:
        return self.get_job_info(job_id).status

    def list_jobs(self) -> list[JobDetails]:
        return [JobDetails.from_json(d) for d in self._api.json("GET", "/api/jobs/")]

    def get_job_logs(self, job_id: str) -> str:
        return self._api.json("GET", f"/api/jobs/{job_id}/logs")["logs"]

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """Yield the job's output as it is written, until the job ends."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        async with connect(self._api.ws_url(f"/api/jobs/{job_id}/logs/tail"),
                           additional_headers=self._api.headers, max_size=None,
                           close_timeout=2) as ws:  # Ctrl-C's teardown waits at most this for the head
            while True:
                try:
                    message = await ws.recv()
                except ConnectionClosed as e:
                    code = e.rcvd.code if e.rcvd is not None else None
                    if code in (1000, 1001):
                        return
                    reason = e.rcvd.reason if e.rcvd is not None else ""
                    raise RuntimeError(reason or f"the log stream of job {job_id} closed unexpectedly "
                                       f"(code {code})") from None
                yield message if isinstance(message, str) else message.decode(errors="replace")

    # ------------------------------------------------------------ control
    def stop_job(self, job_id: str) -> bool:
        return self._api.json("POST", f"/api/jobs/{job_id}/stop")["stopped"]

    def delete_job(self, job_id: str) -> bool:
        return self._api.json("DELETE", f"/api/jobs/{job_id}")["deleted"]

    def get_version(self) -> str:
        return self._api.json("GET", "/api/version")["version"]

    def get_address(self) -> str:
        return self._address
