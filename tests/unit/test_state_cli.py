"""`raylite list/get/job` argument checking that needs no cluster (click's runner, in-process)."""

from click.testing import CliRunner

from raylite.cli import main
from raylite.dashboard.state_client import normalize_resource, parse_filter


def test_filters_and_resource_names():
    assert parse_filter("state=ALIVE") == ("state", "=", "ALIVE")
    assert parse_filter("name!=x=y") == ("name", "!=", "x=y")
    assert normalize_resource("placement-groups") == "placement_groups"
    assert normalize_resource("actor") == "actors"


def test_cli_rejects_bad_arguments_before_any_request():
    runner = CliRunner()
    r = runner.invoke(main, ["list", "gizmos"])
    assert r.exit_code == 2 and "gizmos" in r.output
    r = runner.invoke(main, ["list", "tasks", "--filter", "nonsense", "--address", "http://127.0.0.1:9"])
    assert r.exit_code == 1 and "KEY=VALUE" in r.output
    r = runner.invoke(main, ["job", "submit", "--runtime-env-json", "{x", "--address", "http://127.0.0.1:9",
                             "--", "echo"])
    assert r.exit_code == 1 and "--runtime-env-json is not valid JSON" in r.output


def test_cli_unreachable_server_is_a_clear_error():
    r = CliRunner().invoke(main, ["list", "actors", "--address", "http://127.0.0.1:9"])
    assert r.exit_code == 1 and "could not reach the raylite API server at http://127.0.0.1:9" in r.output


def test_list_jobs_table_shows_times_as_job_list_does():
    import json
    import time

    from raylite.cli.state import _render
    from raylite.cli.table import format_time_ms

    ms = 1795502386193
    rows = [{"job_id": "1556d5a3", "submission_id": "raysubmit_x", "type": "SUBMISSION", "status": "SUCCEEDED",
             "entrypoint": "python x.py", "start_time": ms, "end_time": None}]
    table = _render(rows, "jobs", "table", False)
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) in table and str(ms) not in table
    assert format_time_ms(ms) in table and format_time_ms(None) == "-"
    assert json.loads(_render(rows, "jobs", "json", False))[0]["start_time"] == ms  # machines keep the number
