"""A real second local user for the tests that play one: created with `useradd` (root only),
removed afterwards. Its actions are shell commands run under its uid and gid."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class OtherUser:
    name: str
    uid: int
    gid: int

    def run(self, script: str) -> None:
        """Run `script` with /bin/sh as this user; raises if it fails."""
        out = subprocess.run(["/bin/sh", "-c", script], user=self.uid, group=self.gid,
                             extra_groups=[], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"as {self.name}: {script!r} failed: {out.stderr}"


@pytest.fixture(scope="session")
def other_user():
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create a second local user")
    name = f"rlsec{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        import pwd

        entry = pwd.getpwnam(name)
        yield OtherUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def shared_tmp():
    """A world-writable sticky folder, like /tmp, that the other user can reach."""
    path = tempfile.mkdtemp(prefix="rlsec-tmp-", dir="/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
