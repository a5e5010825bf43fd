"""working_dir packages: deterministic, honour excludes, refuse oversize trees, unpack once."""

from __future__ import annotations

import os

import pytest

from raylite._core.runtime_env import packaging


def _tree(root):
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("A = 1\n")
    (root / "notes.txt").write_text("hello")
    (root / "model.ckpt").write_bytes(b"0" * 4096)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    return root


def test_same_tree_same_digest_and_excludes(tmp_path):
    root = _tree(tmp_path / "p")
    d1, z1 = packaging.package_directory(str(root), ["*.ckpt"])
    os.utime(root / "notes.txt", (1, 1))  # timestamps do not change the digest
    d2, _ = packaging.package_directory(str(root), ["*.ckpt"])
    assert d1 == d2
    out = packaging.unpack(z1, str(tmp_path / "session"), d1)
    assert sorted(os.listdir(out)) == ["notes.txt", "src"]  # no .git, no excluded checkpoint
    assert (tmp_path / "session" / "runtime_resources" / "working_dir" / d1 / "src" / "a.py").read_text() == "A = 1\n"
    (root / "notes.txt").write_text("changed")
    assert packaging.package_directory(str(root), ["*.ckpt"])[0] != d1
    assert packaging.unpack(z1, str(tmp_path / "session"), d1) == out  # unpacked once, reused


def test_oversize_tree_names_the_largest_files_and_the_fix(tmp_path):
    root = _tree(tmp_path / "p")
    with pytest.raises(packaging.PackageTooLargeError, match=r"model\.ckpt.*excludes"):
        packaging.package_directory(str(root), max_bytes=1000)


def test_zip_file_working_dir(tmp_path):
    root = _tree(tmp_path / "p")
    digest, data = packaging.package_directory(str(root))
    zpath = tmp_path / "wd.zip"
    zpath.write_bytes(data)
    assert packaging.package_zip_file(str(zpath)) == (digest, data)
    (tmp_path / "not.zip").write_text("plain text")
    with pytest.raises(ValueError, match="not a zip archive"):
        packaging.package_zip_file(str(tmp_path / "not.zip"))
