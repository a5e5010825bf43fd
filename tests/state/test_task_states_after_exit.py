"""Task states end truthfully when the driver that owns the tasks exits at once (issue 22).

A submitted job's driver exits right after its last get(); the node then stops the workers
it leased, and their own task events used to die with them (rows stuck at
PENDING_NODE_ASSIGNMENT forever). Every row must end FINISHED or FAILED, with the facts of
the worker that ran it."""

from __future__ import annotations

import sys

import pytest

from raylite.util import state
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)

JOB = """
import raylite
raylite.init(address="auto")

@raylite.remote
def double(x):
    return 2 * x

@raylite.remote(max_retries=0)
def explode():
    raise ValueError("boom")

@raylite.remote
class Acc:
    def add(self, x):
        return x

acc = Acc.remote()
print(raylite.get([double.remote(i) for i in range(6)]), raylite.get(acc.add.remote(1)))
try:
    raylite.get(explode.remote())
except ValueError:
    pass
"""

KILLED = """
import os, signal, time
import raylite
raylite.init(address="auto")

@raylite.remote
def forever(path):
    open(path, "w").close()
    time.sleep(600)

ref = forever.remote({marker!r})
while not os.path.exists({marker!r}):
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)  # no shutdown, no flush: the head must close the row
"""


def _submit(api, code: str, tmp_path) -> dict:
    script = tmp_path / "entry.py"
    script.write_text(code)
    c = api.client()
    sid = c.post("/api/jobs/", json={"entrypoint": f"{sys.executable} {script}"}).json()["submission_id"]
    return wait_for(lambda: (d := c.get(f"/api/jobs/{sid}").json())["status"] in ("SUCCEEDED", "FAILED") and d,
                    60, 0.1, "the job to end")


def _tasks_of(job_id: str) -> list:
    return state.list_tasks(filters=[("job_id", "=", job_id)], limit=10000, detail=True)


def test_every_task_of_an_exited_job_ends_finished_or_failed(api, tmp_path):
    job = _submit(api, JOB, tmp_path)
    assert job["status"] == "SUCCEEDED", job

    def settled():  # the owner's and the workers' events arrive separately: wait for both
        tasks = _tasks_of(job["job_id"])
        return (len(tasks) == 9 and all(t.state in ("FINISHED", "FAILED") and t.worker_pid for t in tasks)
                and all(t.error_message for t in tasks if t.state == "FAILED") and tasks)

    tasks = wait_for(settled, 20, 0.2, "every task of the job to end")
    by_name: dict[str, list] = {}
    for t in tasks:
        by_name.setdefault(t.func_or_class_name, []).append(t)
    assert [t.state for t in by_name["double"]] == ["FINISHED"] * 6
    assert [t.state for t in by_name["Acc.add"]] == ["FINISHED"]
    (boom,) = by_name["explode"]
    assert boom.state == "FAILED" and boom.error_type == "TASK_EXECUTION_EXCEPTION" and "boom" in boom.error_message
    assert [t.state for t in by_name["Acc.__init__"]] == ["FINISHED"]
    # the rows carry the executing worker's facts: its events reached the head before it was stopped
    assert all(t.node_id for t in tasks)


def test_a_killed_drivers_running_task_ends_failed_with_the_reason(api, tmp_path):
    job = _submit(api, KILLED.format(marker=str(tmp_path / "started")), tmp_path)
    assert job["status"] == "FAILED", job

    def closed():
        tasks = _tasks_of(job["job_id"])
        return tasks and all(t.state == "FAILED" for t in tasks) and tasks

    (task,) = wait_for(closed, 30, 0.2, "the killed driver's task to be closed")
    assert task.func_or_class_name == "forever" and task.error_type == "WORKER_DIED"
    assert "driver exited" in task.error_message
