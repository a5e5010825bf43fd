"""`raylite job submit -- ARGV...` runs ARGV as the shell gave it (quoted, as Ray's CLI does):
`-- python -c "import os; print(1)"` used to reach the job's shell unquoted and fail with
"Syntax error: word unexpected"."""

from __future__ import annotations

import json

from raylite.cli.job import _entrypoint


def test_several_arguments_keep_their_quoting_and_one_is_a_command_line():
    assert _entrypoint(["python", "-c", "import os; print(1)"]) == "python -c 'import os; print(1)'"
    assert _entrypoint(["python a.py && python b.py"]) == "python a.py && python b.py"


def test_a_quoted_argument_reaches_the_job_intact(api):
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    r = api.cli("job", "submit", "--", "python", "-c", code, "two words", "x;y")
    assert r.returncode == 0, r.stderr
    printed = [line for line in r.stdout.splitlines() if line.startswith("[")]
    assert printed and json.loads(printed[0]) == ["two words", "x;y"]
