"""A real S3 API for tests: moto's standalone server on a free loopback port.

Started the way s3fs's own suite does it (``python -m moto.server`` in a subprocess), so
every process of a raylite cluster — driver, node daemons, workers — talks HTTP to the
same server. Clients find it through the usual variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), set by ``s3_env`` before a cluster starts so its processes
inherit them. Tests skip with the reason when moto (``pip install 'moto[server]'``, in the
``test`` extra) is missing or its server does not start.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen
    log_path: str
    buckets: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The variables a process needs to use this server as its S3."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def arrow_filesystem(self, **kw):
        """A pyarrow S3FileSystem pointed at this server (what storage_filesystem= takes)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint, region="us-east-1",
                                 access_key=kw.pop("access_key", "testing"),
                                 secret_key=kw.pop("secret_key", "testing"), **kw)

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


def start_s3_server(*, check_credentials: bool = False, timeout_s: float = 30.0) -> S3Server:
    """Start moto's server on 127.0.0.1 port 0 and wait for the port it printed.

    ``check_credentials``: every request must carry keys moto's IAM knows (none do), so any
    key is refused as S3 refuses a bad one (moto's INITIAL_NO_AUTH_ACTION_COUNT=0)."""
    pytest.importorskip("moto.server", reason="moto is not installed: pip install 'moto[server]'")
    pytest.importorskip("flask", reason="moto's server needs its extra: pip install 'moto[server]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if check_credentials:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    fd, log_path = tempfile.mkstemp(prefix="moto-", suffix=".log")
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                               stdout=fd, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
    os.close(fd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(log_path) as f:
            found = re.search(r"Running on (http://127\.0\.0\.1:\d+)", f.read())
        if found:
            return S3Server(found.group(1), process, log_path)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    with open(log_path) as f:
        tail = f.read()[-2000:]
    process.kill()
    process.wait(10)
    os.unlink(log_path)
    pytest.skip(f"moto's S3 server did not start (exit {process.poll()}): {tail}")


@pytest.fixture(scope="session")
def s3_server():
    """One S3 server for the session (tests use buckets of their own)."""
    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def s3_env(s3_server):
    """AWS_* variables pointing at the server, for the module: set before a cluster starts,
    so its node daemons and workers inherit them."""
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(key)
        for key, value in s3_server.env().items():
            mp.setenv(key, value)
        yield s3_server


@pytest.fixture(scope="module")
def s3_cluster(request, s3_env):
    """A local cluster started after s3_env, so its daemons and workers see the S3 server; the
    module's S3_CLUSTER_CPUS (default 2) sets its CPUs. Yields the server."""
    import raylite

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=getattr(request.module, "S3_CLUSTER_CPUS", 2))
    yield s3_env
    raylite.shutdown()
