"""A Serve URI's zip is bounded by what it unpacks to, not by its compressed size, and a killed
agent's partial downloads do not stay in the cache (finding 5 of issue 33)."""

from __future__ import annotations

import functools
import http.server
import io
import os
import threading
import zipfile

import pytest

from raylite.serve._internal import remote_uris


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)


def _bomb(size: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.bin", b"\0" * size)
    return buf.getvalue()


def test_a_zip_that_expands_past_the_limit_is_refused_and_leaves_nothing(site, tmp_path, monkeypatch):
    root, base = site
    monkeypatch.setattr(remote_uris, "MAX_UNPACKED_BYTES", 8 << 20)
    (root / "bomb.zip").write_bytes(_bomb(64 << 20))  # 64 KiB compressed, 64 MiB unpacked
    assert (root / "bomb.zip").stat().st_size < 1 << 20
    cache = str(tmp_path / "cache")
    with pytest.raises(ValueError, match="unpacks to more than 8 MiB"):
        remote_uris.fetch(f"{base}/bomb.zip", cache)
    assert os.listdir(cache) == []


def test_a_zip_whose_header_lies_about_its_size_is_still_bounded(site, tmp_path, monkeypatch):
    """The count is of the bytes written, so a small declared file_size changes nothing."""
    root, base = site
    monkeypatch.setattr(remote_uris, "MAX_UNPACKED_BYTES", 8 << 20)
    (root / "bomb.zip").write_bytes(_bomb(16 << 20))
    real = zipfile.ZipFile.infolist

    def lying(self):
        infos = real(self)
        for info in infos:
            info.file_size = 10
        return infos

    monkeypatch.setattr(zipfile.ZipFile, "infolist", lying)
    with pytest.raises(ValueError):
        remote_uris.fetch(f"{base}/bomb.zip", str(tmp_path / "cache"))


def test_too_many_entries_are_refused(site, tmp_path, monkeypatch):
    root, base = site
    monkeypatch.setattr(remote_uris, "MAX_UNPACKED_FILES", 50)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(51):
            z.writestr(f"f{i}", "")
    (root / "many.zip").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="51 entries, more than 50"):
        remote_uris.fetch(f"{base}/many.zip", str(tmp_path / "cache"))


def test_partial_downloads_of_a_dead_agent_are_removed(site, tmp_path):
    root, base = site
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    dead = 2**22 + 12345  # above any pid_max default: no such process
    (cache / f".part-{dead}-abc").mkdir()
    (cache / f".part-{dead}-abc" / "half.bin").write_bytes(b"x" * 1000)
    (cache / f".part-{dead}-blob").write_bytes(b"x")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("m.py", "X = 1\n")
    (root / "ok.zip").write_bytes(buf.getvalue())
    got = remote_uris.fetch(f"{base}/ok.zip", str(cache))
    assert open(os.path.join(got, "m.py")).read() == "X = 1\n"
    assert not [n for n in os.listdir(cache) if n.startswith(".part-")]
