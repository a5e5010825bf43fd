"""A task's error that no get() read before its last ref went is reported on the driver, as
Ray's "Unhandled error" is: a fire-and-forget task's failure is not lost silently."""

from __future__ import annotations

import raylite as ray
import raylite._private.worker as private_worker
from tests.conftest import wait_for


@ray.remote
def fails(tag: str) -> None:
    raise ValueError(tag)


def reports(monkeypatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(private_worker, "_unhandled_error_handler", lambda err: seen.append(str(err)))
    return seen


def test_an_error_nobody_read_is_reported_once_and_a_read_one_is_not(cluster, monkeypatch):
    seen = reports(monkeypatch)
    read = fails.remote("was read")
    try:
        ray.get(read)
    except ValueError:
        pass
    del read
    dropped = fails.remote("dropped unread")
    ray.wait([dropped], timeout=30)
    del dropped
    wait_for(lambda: seen, what="the unread error reported")
    assert len(seen) == 1 and "dropped unread" in seen[0]


def test_an_error_that_arrives_after_its_refs_went_is_reported(cluster, monkeypatch):
    seen = reports(monkeypatch)
    ref = fails.remote("nobody waited")
    del ref  # dropped while the task still runs
    wait_for(lambda: seen, what="the error reported when it arrived")
    assert "nobody waited" in seen[0]


def test_reports_can_be_turned_off(cluster, monkeypatch):
    monkeypatch.setenv("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    seen = reports(monkeypatch)
    ref = fails.remote("quiet")
    ray.wait([ref], timeout=30)
    del ref
    assert ray.get(ray.put(1)) == 1  # the ref's release has been handled by now
    monkeypatch.delenv("RAY_IGNORE_UNHANDLED_ERRORS")
    loud = fails.remote("loud")
    ray.wait([loud], timeout=30)
    del loud
    wait_for(lambda: seen, what="the report once they are on again")
    assert len(seen) == 1 and "loud" in seen[0]  # and none for the one dropped while off


def test_the_default_report_is_one_log_record_naming_the_switch(cluster, caplog):
    ref = fails.remote("logged")
    ray.wait([ref], timeout=30)
    del ref

    def records() -> list[str]:
        return [r.getMessage() for r in caplog.records if "ValueError: logged" in r.getMessage()]

    wait_for(records, what="the unhandled error's log record")
    assert len(records()) == 1
    assert records()[0].startswith("Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ")
