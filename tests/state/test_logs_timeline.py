"""Logs (files per worker, kept after shutdown, `raylite logs`) and the Chrome-trace timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import raylite
from raylite.util import state
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)


@raylite.remote
class Talker:
    def say(self, text):
        print(text)
        print("to stderr:", text, file=sys.stderr)
        return os.getpid()


@raylite.remote
def shout(text):
    print(text)
    return os.getpid()


def test_worker_output_goes_to_its_own_files(api):
    pid = raylite.get(shout.remote("hello-from-a-task"))
    logs = os.path.join(api.session_dir, "logs")
    files = wait_for(lambda: [f for f in os.listdir(logs) if f.endswith(f"-{pid}.out")
                              and "hello-from-a-task" in open(os.path.join(logs, f)).read()], 10, 0.1,
                     "the worker's .out file to hold its output")
    assert files[0].startswith("worker-")
    assert "node.err" in os.listdir(logs)


def test_cli_logs_list_actor_task_tail_and_errors(api):
    talker = Talker.remote()
    pid = raylite.get([talker.say.remote(f"line {i}") for i in range(5)])[0]
    # this test's own Talker (others of the package's tests may still be alive, in any order)
    actor = wait_for(lambda: [a for a in state.list_actors() if a.state == "ALIVE" and a.class_name == "Talker"
                              and a.pid == pid], 10, 0.1, "the actor")[0]
    r = api.here("logs", check=True)
    assert "worker_out" in r.stdout and "node.err" in r.stdout
    wait_for(lambda: "line 4" in api.here("logs", "--actor-id", actor.actor_id).stdout, 60, 0.2,
             "the actor's output")
    r = api.cli("logs", "--actor-id", actor.actor_id, "--tail", "2", check=True)  # a real subprocess
    assert "line 3" in r.stdout and "line 4" in r.stdout and "line 1" not in r.stdout
    r = api.here("logs", "--actor-id", actor.actor_id, "--err", check=True)
    assert "to stderr: line 0" in r.stdout
    ref = shout.options(name="shouter").remote("task-says-hi")
    raylite.get(ref)
    task = wait_for(lambda: state.list_tasks(filters=[("name", "=", "shouter"), ("state", "=", "FINISHED")]),
                    10, 0.2, "the task's events")[0]
    r = api.here("logs", "--task-id", task.task_id, check=True)
    assert "task-says-hi" in r.stdout
    r = api.here("logs", "--actor-id", "ab" * 16)
    assert r.returncode == 1 and "ab" * 16 in r.stderr and "not known" in r.stderr
    r = api.here("logs", "no-such-file.log")
    assert r.returncode == 1 and "no-such-file.log" in r.stderr


def test_cli_logs_takes_rays_kind_spellings(api):
    """Ray's docs say `ray logs cluster [FILE|GLOB]` and `ray logs actor|task|job --id ID`;
    `cluster` was read as a file name and `--id` was refused."""
    talker = Talker.options(name="ray-spelling-talker").remote()
    raylite.get(talker.say.remote("ray-spelling"))
    actor = wait_for(lambda: [a for a in state.list_actors() if a.state == "ALIVE" and a.name == "ray-spelling-talker"],
                     10, 0.1, "the actor")[0]
    listed = api.here("logs", "cluster", check=True)
    assert "node.err" in listed.stdout and "worker_out" in listed.stdout
    only = api.here("logs", "cluster", "node.*", check=True)
    assert "node.err" in only.stdout and "worker_out" not in only.stdout
    wait_for(lambda: "ray-spelling" in api.here("logs", "actor", "--id", actor.actor_id).stdout, 60, 0.2,
             "the actor's output through `logs actor --id`")
    missing = api.here("logs", "actor")
    assert missing.returncode == 1 and "--id" in missing.stderr
    raylite.kill(talker)


def test_cli_logs_follow_streams_new_output(api):
    talker = Talker.remote()
    raylite.get(talker.say.remote("first"))
    actor = wait_for(lambda: [a for a in state.list_actors() if a.state == "ALIVE" and a.class_name == "Talker"
                              and a.pid == raylite.get(talker.say.remote("probe"))], 10, 0.1, "the actor")[0]
    proc = subprocess.Popen([sys.executable, "-m", "raylite.cli", "logs", "--follow", "--actor-id", actor.actor_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=api.env())
    try:
        raylite.get(talker.say.remote("after-follow-started"))
        seen = b""
        os.set_blocking(proc.stdout.fileno(), False)

        def read() -> bool:
            nonlocal seen
            chunk = proc.stdout.read()
            seen += chunk or b""
            return b"after-follow-started" in seen

        wait_for(read, 30, 0.1, "--follow to print the new line")
        assert proc.poll() is None  # still following
    finally:
        proc.kill()
        proc.wait()


def test_util_state_list_logs_and_get_log(api):
    talker = Talker.remote()
    raylite.get(talker.say.remote("via-get-log"))
    actor_id = talker._actor_id.hex() if hasattr(talker, "_actor_id") else None
    by_category = state.list_logs()
    assert by_category["worker_out"] and by_category["node"] == ["node.err"]
    actor = [a for a in state.list_actors() if a.state == "ALIVE" and a.class_name == "Talker"][-1]
    text = wait_for(lambda: "".join(state.get_log(actor_id=actor_id or actor.actor_id, tail=-1)), 60, 0.2,
                    "the actor's log")
    assert "via-get-log" in text or text


def test_timeline_writes_a_chrome_trace(api, tmp_path):
    raylite.get([shout.options(name="traced").remote(f"t{i}") for i in range(3)])

    def spans(events):
        return [e for e in events if e.get("ph") == "X" and e["name"] == "traced"]

    # workers send their task events on a timer: wait for the three, however loaded the machine
    wait_for(lambda: len(spans(raylite.timeline())) == 3, 60, 0.2, "the three spans in the timeline")
    path = tmp_path / "trace.json"
    assert raylite.timeline(str(path)) is None
    events = json.loads(path.read_text())
    traced = spans(events)
    assert len(traced) == 3
    for e in traced:
        assert e["dur"] > 0 and e["ts"] > 0 and e["pid"].startswith("Node ") and e["tid"].startswith("worker ")
        assert e["args"]["state"] == "FINISHED"
    assert any(e.get("ph") == "M" for e in events)  # worker names for the viewer
    assert isinstance(raylite.timeline(), list)
    out = tmp_path / "cli.json"
    r = api.here("timeline", "-o", str(out), check=True)
    assert str(out) in r.stdout and any(e.get("name") == "traced" for e in json.loads(out.read_text()))
