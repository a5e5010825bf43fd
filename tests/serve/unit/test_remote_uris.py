"""Remote .zip URIs of a Serve config's runtime_env: fetched once, unwrapped, bounded, and
refused when a zip entry would escape its directory (no cluster)."""

from __future__ import annotations

import functools
import http.server
import io
import pathlib
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


def _zip(entries: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in entries.items():
            z.writestr(name, text)
    return buf.getvalue()


def test_fetch_unwraps_a_single_top_directory_and_caches(site, tmp_path):
    root, base = site
    (root / "a.zip").write_bytes(_zip({"top/m.py": "X = 1\n"}))
    (root / "flat.zip").write_bytes(_zip({"m.py": "X = 2\n", "n.py": ""}))
    cache = str(tmp_path / "cache")
    got = remote_uris.fetch(f"{base}/a.zip", cache)
    assert open(f"{got}/m.py").read() == "X = 1\n" and got.endswith("/top")
    (root / "a.zip").unlink()  # the second time comes from the cache
    assert remote_uris.fetch(f"{base}/a.zip", cache) == got
    flat = remote_uris.fetch(f"{base}/flat.zip", cache)
    assert sorted(p.name for p in pathlib.Path(flat).iterdir()) == ["m.py", "n.py"]


def test_bad_uris_are_refused_with_the_reason(site, tmp_path, monkeypatch):
    root, base = site
    cache = str(tmp_path / "cache")
    (root / "evil.zip").write_bytes(_zip({"../../escaped.py": "boom"}))
    (root / "text.zip").write_bytes(b"not a zip at all")
    (root / "big.zip").write_bytes(_zip({"big.txt": "x" * 5000}))
    cases = [(f"{base}/evil.zip", "points outside"), (f"{base}/text.zip", "not a zip"),
             (f"{base}/nope.zip", "could not be downloaded"), (f"{base}/archive.tar.gz", ".zip files only")]
    for uri, why in cases:
        with pytest.raises(ValueError, match=why):
            remote_uris.fetch(uri, cache)
    assert not (tmp_path / "escaped.py").exists()
    monkeypatch.setattr(remote_uris, "MAX_DOWNLOAD_BYTES", 1000)
    with pytest.raises(ValueError, match="larger than"):
        remote_uris.fetch(f"{base}/big.zip", cache)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".part")]
