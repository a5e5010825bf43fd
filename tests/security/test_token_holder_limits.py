"""What a token holder's job may make the head show (issue 33, the token holders' items): a
`pip:` path naming a file that is not a requirements file is refused by line number, never
echoed back (the head reads it; a job's error would otherwise print any file the head can read)."""

from __future__ import annotations

import pytest

from raylite._core.runtime_env import pip_env


def test_a_pip_file_that_is_not_requirements_is_refused_without_its_content(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    with pytest.raises(ValueError) as e:
        pip_env.requirements(str(secret))
    assert "line 1 is not a requirement" in str(e.value)
    assert "SECRETHASH" not in str(e.value)


def test_a_real_requirements_file_still_works(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# pinned\nrequests==2.32.0\n--extra-index-url https://example.invalid/simple\n"
                   "pkg @ https://example.invalid/pkg.whl\n")
    reqs, _ = pip_env.requirements(str(req))
    assert reqs == ["requests==2.32.0", "--extra-index-url https://example.invalid/simple",
                    "pkg @ https://example.invalid/pkg.whl"]
