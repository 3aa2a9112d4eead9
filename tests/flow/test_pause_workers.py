"""Pause and resume with real ``runworker`` processes under load: nothing of a paused queue or
type starts, the rest keeps running, and a resume is picked up within one poll interval."""

from __future__ import annotations

import time

import pytest

from runnerq_django import flow
from tests.flow import handlers
from tests.flow.conftest import ledger_rows
from tests.helpers import wait_until
from tests.worker.support import fetch, status_of, wait_for_workers

pytestmark = pytest.mark.slow

POLL = 1.0
LOAD_Q = "flow_load"
PAUSED_Q = "flow_paused"


def db_now():
    return fetch("SELECT clock_timestamp()")[0][0]


def started(ids) -> list:
    return [row for row in ledger_rows() if row[0] in set(ids)]


@pytest.mark.parametrize("scope", ["queue", "type"])
def test_paused_work_does_not_start_under_load_and_starts_within_a_poll_interval_of_resume(
    flow_worker, scope
):
    if scope == "queue":
        flow.pause(PAUSED_Q, by="test", reason="worker test")
    else:
        flow.pause(PAUSED_Q, handlers.work, by="test")
    args = ("--queue", LOAD_Q, "--queue", PAUSED_Q, "--poll-interval", str(POLL), "--concurrency", "4")
    flow_worker(*args)
    flow_worker(*args)
    wait_for_workers(PAUSED_Q, 2)
    # Load: 8 slots kept busy for well over 5 s by short activities in the other queue.
    load = handlers.work.enqueue_many([{"seconds": 0.05}] * 1200, queue=LOAD_Q)
    held = handlers.work.enqueue_many([{"seconds": 0}] * 5, queue=PAUSED_Q)
    # With a paused type only, the queue's other types keep running.
    other = handlers.other.enqueue({"seconds": 0}, queue=PAUSED_Q)
    time.sleep(5.0)
    assert len(started([h.id for h in load])) > 100, "the load did not run"
    assert started([h.id for h in held]) == [], "an activity of the paused queue/type started"
    assert {status_of(h.id) for h in held} == {"pending"}
    if scope == "type":
        assert status_of(other.id) == "completed"
    else:
        assert status_of(other.id) == "pending"

    flow.resume(PAUSED_Q, None if scope == "queue" else handlers.work, by="test")
    resumed_at = db_now()
    wait_until(lambda: len(started([h.id for h in held])) == 5, timeout=10, message="the held work to start")
    first = min(row[5] for row in started([h.id for h in held]))
    # Within one poll interval of the resume (the resume also wakes the workers with a NOTIFY).
    assert (first - resumed_at).total_seconds() < POLL, first - resumed_at
