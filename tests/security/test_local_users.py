"""Another local user must not be able to plant code or data where raylite looks for its own:
Serve's URI cache, the temp and session dirs, runtime_env caches, the object store's and spill
folders, the sockets dir. Each test has a real second user (other_user.py) make the folder
first, then checks that raylite refuses it instead of running or trusting what is inside."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import types

import pytest

from raylite._core.private_paths import UnsafeDirectoryError, owned_dir

from .other_user import other_user, shared_tmp  # noqa: F401 (fixtures)

pytestmark = pytest.mark.root


def test_a_planted_serve_uri_entry_is_never_run(other_user, shared_tmp, monkeypatch):  # noqa: F811
    from raylite.serve._internal import remote_uris

    uri = "http://127.0.0.1:9/app.zip"  # nothing listens there: a fetch would fail loudly
    key = hashlib.sha256(uri.encode()).hexdigest()[:24]
    cache = os.path.join(shared_tmp, f"raylite-serve-uris-{os.getuid()}")
    other_user.run(f"mkdir -m 777 {cache} && mkdir -m 777 {cache}/{key} && "
                   f"echo 'PLANTED = 1' > {cache}/{key}/app.py")
    monkeypatch.setattr(tempfile, "tempdir", shared_tmp)
    with pytest.raises(UnsafeDirectoryError, match="owned by rlsec"):
        remote_uris.fetch(uri)


def test_a_planted_entry_in_our_own_cache_is_replaced_not_reused(tmp_path):
    """A folder inside the cache without the manifest we write last is not ours to trust."""
    from raylite.serve._internal import remote_uris

    uri = "http://127.0.0.1:9/app.zip"
    cache = str(tmp_path / "cache")
    key = hashlib.sha256(uri.encode()).hexdigest()[:24]
    os.makedirs(os.path.join(cache, key))
    open(os.path.join(cache, key, "app.py"), "w").write("PLANTED = 1\n")
    with pytest.raises(ValueError, match="could not be downloaded"):
        remote_uris.fetch(uri, cache)
    assert not os.path.exists(os.path.join(cache, key))


def test_a_temp_dir_made_by_another_user_is_refused_by_init(other_user, shared_tmp):  # noqa: F811
    planted = os.path.join(shared_tmp, "raylite-sessions")
    other_user.run(f"mkdir -m 755 {planted}")
    env = {**os.environ, "RAYLITE_TEMP_DIR": planted}
    out = subprocess.run([sys.executable, "-c", "import raylite; raylite.init(num_cpus=1)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "refuses to use" in out.stderr and "RAYLITE_TEMP_DIR" in out.stderr
    assert os.listdir(planted) == []  # no session, token or socket was written there


@pytest.mark.parametrize("what", ["object store", "spill"])
def test_object_store_and_spill_folders_of_another_user_are_refused(other_user, shared_tmp, what):  # noqa: F811
    from raylite._core.node import shm_files

    store = types.SimpleNamespace(directory=os.path.join(shared_tmp, "store"),
                                  pool_dir=os.path.join(shared_tmp, "store", "pool"),
                                  spill_dir=os.path.join(shared_tmp, "spill"))
    planted = store.directory if what == "object store" else store.spill_dir
    other_user.run(f"mkdir -m 700 {planted}")
    with pytest.raises(UnsafeDirectoryError, match="owned by rlsec"):
        shm_files.make_dirs(store)


def test_runtime_env_pip_and_working_dir_caches_of_another_user_are_refused(other_user, shared_tmp):  # noqa: F811
    from raylite._core.runtime_env import packaging, pip_env

    other_user.run(f"mkdir -p -m 755 {shared_tmp}/runtime_resources")
    with pytest.raises(UnsafeDirectoryError):
        pip_env.ensure(shared_tmp, "pip", {"packages": ["surely-not-installed-pkg==1"]})
    src = os.path.join(shared_tmp, "m.py")
    open(src, "w").write("X = 1\n")
    digest, data = packaging._zip([("m.py", src)])
    with pytest.raises(UnsafeDirectoryError):
        packaging.unpack(data, shared_tmp, digest)


def test_a_sockets_dir_of_another_user_is_refused(other_user, shared_tmp):  # noqa: F811
    from raylite._core.cluster.files import private_dir

    other_user.run(f"mkdir -m 700 {shared_tmp}/sockets")
    with pytest.raises(UnsafeDirectoryError):
        private_dir(os.path.join(shared_tmp, "sockets"))


def test_a_serve_logs_dir_of_another_user_is_refused(other_user, shared_tmp, monkeypatch):  # noqa: F811
    """Their folder could hold a symlink named like a replica's log, pointing at our files."""
    from raylite.serve._internal import logs

    other_user.run(f"mkdir -m 777 {shared_tmp}/raylite-serve-logs")
    monkeypatch.setattr(tempfile, "tempdir", shared_tmp)
    with pytest.raises(UnsafeDirectoryError, match="owned by rlsec"):
        logs.logs_dir()


def test_a_folder_under_another_users_folder_is_refused(other_user, shared_tmp):  # noqa: F811
    """Ours, but inside a folder the other user may rename: they could swap it."""
    other_user.run(f"mkdir -m 777 {shared_tmp}/theirs")
    with pytest.raises(UnsafeDirectoryError, match="folder above"):
        owned_dir(os.path.join(shared_tmp, "theirs", "mine"))


def test_our_own_folders_are_made_private_and_reused(tmp_path):
    path = owned_dir(str(tmp_path / "a" / "b"))
    assert os.stat(path).st_mode & 0o777 == 0o700
    assert owned_dir(path) == path
    os.chmod(path, 0o777)
    with pytest.raises(UnsafeDirectoryError, match="other users may write"):
        owned_dir(path)
