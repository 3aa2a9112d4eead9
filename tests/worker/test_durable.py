"""Durable execution semantics (ctx.step / sleep / spawn / wait / wait_all) on an in-process worker."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from runnerq_django import ActivityFailed
from runnerq_django.exceptions import AttemptLost, Interrupt, Park
from runnerq_django.logs import event_of
from runnerq_django.spec.keys import checkpoint_id, step_key
from runnerq_django.worker.context import Context
from tests.worker import handlers
from tests.worker.support import events_of, fetch, row_of, wait_for_status


def test_a_successful_step_runs_once_across_retries(worker):
    worker()
    result = handlers.steps.enqueue(None).result(timeout=15)
    assert result == {"first": 1, "second": 2, "attempt": 2}
    assert handlers.CALLS["steps.first"] == 1  # memoized: not run again in attempt 2
    assert handlers.CALLS["steps.second"] == 2  # its retryable failure was not memoized
    handle_id = fetch("SELECT id FROM runnerq_activities WHERE activity_type = 't.steps'")[0][0]
    rows = dict(
        fetch(
            "SELECT step, state FROM runnerq_results WHERE owner_activity_id = %s AND step IS NOT NULL",
            [handle_id],
        )
    )
    assert rows == {"run:first": "Ok", "run:second": "Ok"}
    assert fetch("SELECT activity_id FROM runnerq_results WHERE step = 'run:first'")[0][0] == checkpoint_id(
        handle_id, "run", "first"
    )


def test_a_non_retryable_step_failure_is_memoized(worker):
    worker()
    result = handlers.step_non_retryable.enqueue(None).result(timeout=15)
    assert result["attempt"] == 2 and "card declined" in result["error"]
    assert handlers.CALLS["step_non_retryable.fn"] == 1  # attempt 2 replayed the stored failure
    assert handlers.CALLS["step_non_retryable.caught"] == 2


def test_a_short_sleep_waits_in_process(worker):
    worker()
    handle = handlers.sleeper.enqueue({"seconds": 0.3})
    assert handle.result(timeout=10) == {"attempt": 1}
    assert "Yielded" not in events_of(handle.id)
    assert handlers.CALLS["sleeper.before"] == 1


@override_settings(RUNNERQ={"INLINE_WAIT_SECONDS": 0.5})
def test_a_long_sleep_parks_without_using_an_attempt(worker):
    worker()
    handle = handlers.sleeper.enqueue({"seconds": 1.5})
    wait_for_status(handle.id, "waiting")
    row = row_of(handle.id)
    assert row["current_worker_id"] is None and row["retry_count"] == 0 and row["scheduled_at"] is not None
    assert handle.result(timeout=10) == {"attempt": 1}  # a park is not an attempt
    assert events_of(handle.id) == ["Yielded"]
    assert handlers.CALLS["sleeper.before"] == 2 and handlers.CALLS["sleeper.after"] == 1


def test_a_swallowed_park_still_parks(worker, caplog):
    worker()
    with caplog.at_level(logging.WARNING, logger="runnerq_django.worker"):
        handle = handlers.swallows_park.enqueue(None)
        wait_for_status(handle.id, "waiting")
    assert handlers.CALLS["swallows_park.swallowed"] == 1
    assert handle.stored_result() is None  # the returned value was not taken as the result
    assert any(event_of(record) == "activity.park_swallowed" for record in caplog.records)


def test_park_and_claim_loss_are_not_exceptions():
    assert issubclass(Park, BaseException) and not issubclass(Park, Exception)
    assert issubclass(AttemptLost, Interrupt) and not issubclass(AttemptLost, Exception)


def test_children_are_spawned_once_and_awaited(worker):
    worker()
    parent = handlers.parent.enqueue({"children": 3})
    result = parent.result(timeout=15)
    assert result["results"] == [{"n": 0}, {"n": 1}, {"n": 2}]
    rows = fetch(
        "SELECT id, parent_activity_id, root_activity_id, depth, idempotency_key FROM runnerq_activities "
        "WHERE parent_activity_id = %s ORDER BY idempotency_key",
        [parent.id],
    )
    assert len(rows) == 3  # however many times the parent replayed
    assert {str(r[0]) for r in rows} == set(result["ids"])
    assert all(r[1] == parent.id and r[2] == parent.id and r[3] == 1 for r in rows)
    assert [r[4] for r in rows] == [step_key(parent.id, parent.id, f"child-{n}") for n in range(3)]


@override_settings(RUNNERQ={"INLINE_WAIT_SECONDS": 0})
def test_the_parent_parks_until_its_children_finish(worker):
    parent = handlers.parent.enqueue({"children": 2})
    worker(activity_types=["t.parent"])
    wait_for_status(parent.id, "waiting")
    row = row_of(parent.id)
    assert row["waiting_result_id"] is not None
    deps = fetch(
        "SELECT result_id, producer_activity_id FROM runnerq_dependencies WHERE waiter_activity_id = %s",
        [parent.id],
    )
    assert len(deps) == 2 and all(r[0] == r[1] for r in deps)
    worker(activity_types=["t.echo"])  # now someone runs the children
    assert parent.result(timeout=15)["results"] == [{"n": 0}, {"n": 1}]
    assert handlers.CALLS["parent.run"] >= 2


@override_settings(RUNNERQ={"INLINE_WAIT_SECONDS": 0})
def test_waiting_on_many_children_parks_once_with_one_row_per_child(worker):
    """wait_all on 20 children: one park (on the last child), its 20 dependency rows written by one
    registration, one wake. It used to park on the first unfinished child and register every
    missing one again at each park: with the children run one at a time in order, 20 parks."""
    parent = handlers.parent_of_slow.enqueue({"children": 20, "seconds": 0.1})
    worker(activity_types=["t.parent_of_slow"])
    wait_for_status(parent.id, "waiting")
    children = fetch(
        "SELECT id FROM runnerq_activities WHERE parent_activity_id = %s ORDER BY created_at, id", [parent.id]
    )
    assert len(children) == 20
    assert row_of(parent.id)["waiting_result_id"] == children[-1][0]  # the last one spawned
    worker(activity_types=["t.slow"], concurrency=1)  # the children one at a time, in claim order
    assert parent.result(timeout=30) == 20
    assert events_of(parent.id).count("Yielded") == 1
    assert handlers.CALLS["parent.run"] == 2  # the first run, and the replay that found all 20
    deps = fetch(
        "SELECT result_id, producer_activity_id FROM runnerq_dependencies WHERE waiter_activity_id = %s",
        [parent.id],
    )
    assert sorted(r[0] for r in deps) == sorted(c[0] for c in children) and all(r[0] == r[1] for r in deps)


def test_a_failed_child_fails_the_parent(worker):
    worker()
    with pytest.raises(ActivityFailed) as failed:
        handlers.parent_of_failure.enqueue(None).result(timeout=15)
    assert failed.value.kind == "non_retryable"
    assert "bad input: nope" in failed.value.error


def test_context_refuses_writes_once_the_claim_is_lost(transactional_db):
    import uuid

    from runnerq_django.storage.types import ClaimedActivity

    claimed = ClaimedActivity(
        id=uuid.uuid4(),
        token="t",
        queue_name="default",
        activity_type="t.echo",
        payload=None,
        priority=2,
        retry_count=0,
        max_retries=3,
        timeout_seconds=30,
        retry_delay_seconds=1,
        max_retry_delay_seconds=0,
        lease_deadline_ms=0,
        started_at=None,
        created_at=None,
        metadata=None,
        idempotency_key=None,
        parent_activity_id=None,
        root_activity_id=None,
        depth=0,
    )
    ctx = Context(claimed)
    ctx.lost = "reclaimed elsewhere"
    ran = []
    with pytest.raises(AttemptLost, match="reclaimed elsewhere"):
        ctx.step("x", lambda: ran.append(1))
    with pytest.raises(AttemptLost):
        ctx.spawn("t.echo", None, step="c")
    assert ran == []
