"""Signals by id and by idempotency key; cancellation (cascade, running claims fenced out,
awaiters woken)."""

from __future__ import annotations

import time
import uuid

import pytest

from runnerq_django import ActivityFailed, cancel, signal, signal_by_key
from runnerq_django.spec.keys import checkpoint_id, step_key
from runnerq_django.storage.errors import NotFound
from tests.helpers import wait_until
from tests.worker import handlers
from tests.worker.support import events_of, fetch, runs, status_of, wait_for_status


def test_signal_wakes_a_parked_wait(worker):
    worker()
    handle = handlers.waits_for_signal.enqueue({})
    wait_for_status(handle.id, "waiting")
    assert handle.signal("go", {"approved": True}) is True  # it woke the activity
    assert handle.result(timeout=10) == {"signal": {"approved": True}}
    assert "Signaled" in events_of(handle.id) and "Yielded" in events_of(handle.id)
    stored = fetch(
        "SELECT owner_activity_id, step FROM runnerq_results WHERE activity_id = %s",
        [checkpoint_id(handle.id, "signal", "go")],
    )
    assert stored == [(handle.id, "signal:go")]  # the spec's checkpoint id, readable by every SDK


def test_signal_sent_before_the_wait_is_kept(worker):
    handle = handlers.waits_for_signal.enqueue({})
    assert signal(handle.id, "go", "early") is False  # nothing waited yet
    worker()
    assert handle.result(timeout=10) == {"signal": "early"}
    assert "Yielded" not in events_of(handle.id)  # it never had to park


def test_signal_by_idempotency_key(worker):
    worker()
    handlers.waits_for_signal.enqueue({}, idempotency_key="approval-17")
    other = handlers.waits_for_signal.enqueue({}, idempotency_key="approval-18")
    wait_for_status(other.id, "waiting")
    assert signal_by_key(handlers.waits_for_signal, "approval-18", "go", 18) is True
    assert other.result(timeout=10) == {"signal": 18}
    with pytest.raises(NotFound):
        signal_by_key("t.waits_for_signal", "approval-99", "go")


def test_signal_to_an_unknown_activity(transactional_db):
    with pytest.raises(NotFound):
        signal(uuid.uuid4(), "go", None)


def test_signal_timeout_is_a_non_retryable_failure(worker):
    worker()
    handle = handlers.waits_for_signal.enqueue({"timeout": 1})
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=15)
    assert failed.value.kind == "non_retryable" and "SignalTimeout" in failed.value.error


def test_cancel_cascades_and_wakes_the_awaiter(worker):
    parent = handlers.parent.enqueue({"children": 2})
    worker(activity_types=["t.parent"])  # nobody runs the children: the parent waits on them
    wait_for_status(parent.id, "waiting", timeout=15)
    # wait_all registers every unfinished child and parks on the last one (step "child-1").
    children = [
        fetch(
            "SELECT id FROM runnerq_activities WHERE idempotency_key = %s",
            [step_key(parent.id, parent.id, f"child-{n}")],
        )[0][0]
        for n in range(2)
    ]
    assert (
        fetch("SELECT waiting_result_id FROM runnerq_activities WHERE id = %s", [parent.id])[0][0]
        == children[1]
    )
    result = cancel(children[1], reason="not needed")
    assert (result.matched, result.applied) == (1, 1)
    assert status_of(children[1]) == "cancelled" and status_of(children[0]) == "pending"
    # The parent awaited the cancelled child: its cancellation result wakes it, and the child's
    # failure fails the parent (non-retryable).
    with pytest.raises(ActivityFailed) as failed:
        parent.result(timeout=15)
    assert failed.value.kind == "non_retryable" and "cancelled" in failed.value.error
    cancel(parent)  # terminal already: nothing to do, no error
    tree = handlers.parent.enqueue({"children": 2})
    wait_for_status(tree.id, "waiting", timeout=15)
    tree.cancel(reason="whole tree")
    assert {
        status_of(r[0])
        for r in fetch("SELECT id FROM runnerq_activities WHERE root_activity_id = %s", [tree.id])
    } == {"cancelled"}


def test_cancel_fences_out_a_running_handler(worker):
    worker(lease_seconds=1.5, heartbeat_seconds=0.5)
    handle = handlers.step_loop.enqueue({"steps": 200})
    wait_until(lambda: len(runs(activity_id=handle.id)) >= 3, message="the handler to write checkpoints")
    handle.cancel(reason="stop it")
    assert status_of(handle.id) == "cancelled"
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=5)
    assert failed.value.kind == "cancelled"
    time.sleep(1.5)  # the next renewal fails: the handler is interrupted
    written = len(runs(activity_id=handle.id))
    time.sleep(1.0)
    assert len(runs(activity_id=handle.id)) == written  # no more writes from it
    assert written < 60
    checkpoints = fetch(
        "SELECT count(*) FROM runnerq_results WHERE owner_activity_id = %s AND step LIKE 'run:%%'",
        [handle.id],
    )[0][0]
    assert checkpoints <= written + 1
