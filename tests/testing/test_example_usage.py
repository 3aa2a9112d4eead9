"""How to test your own activities with ``runnerq_django.testing`` (docs/how-to/testing.md's example).

The fixtures come from the pytest plugin that the package registers (``pytest11`` entry point);
they use pytest-django's ``transactional_db``, since work runs after its enqueue commits. The
activities are the test project's examples (``testproject/examples/activities.py``).
"""

from __future__ import annotations

from django.db import transaction

from testproject.examples import activities


# 1. Code that enqueues: assert what it enqueued, without running it.
def test_a_webhook_delivered_twice_is_enqueued_once(runnerq_enqueued):
    event = {"event_id": "evt_1", "type": "invoice.paid"}
    activities.receive_webhook(event)
    activities.receive_webhook(event)  # providers deliver at least once
    runnerq_enqueued.assert_enqueued(
        1,
        type=activities.handle_webhook,
        payload_contains={"type": "invoice.paid"},
        idempotency_key="evt_1",
        queue="default",
    )


# 2. Immediate mode: enqueue() runs the handler at once (after commit); read the result as usual.
def test_a_workflow_runs_at_once_in_immediate_mode(runnerq_immediate):
    handle = activities.hello.enqueue({"name": "tests"})
    assert handle.result(timeout=0) == {"greeting": "Hello, tests!", "shouted": "HELLO, TESTS!"}


def test_retries_and_signals_in_immediate_mode(runnerq_immediate):
    # Retried at once, backoffs skipped: fails in attempts 1 and 2, succeeds in attempt 3.
    order = activities.steps_and_retries.enqueue({"succeed_on_attempt": 3})
    assert order.result(timeout=0)["shipping"]["attempt"] == 3
    # A signal sent in the enqueue's transaction is there when the handler waits for it.
    with transaction.atomic():
        approval = activities.approval.enqueue({"timeout": 3600})
        approval.signal("approval", {"approved": True, "by": "ann"})
    assert approval.result(timeout=0) == {"approved": True, "by": "ann"}


# 3. The in-process worker: run what is due, skipping delays and durable sleeps, and look at
#    what ran.
def test_the_in_process_worker_fast_forwards_a_durable_sleep(runnerq_worker):
    handle = activities.durable_sleep.enqueue({"seconds": 3600})
    ran = runnerq_worker.run_until_idle()
    assert [r.outcome for r in ran] == ["waiting"]  # parked for an hour
    ran = runnerq_worker.run_until_idle(fast_forward=True)
    assert [(r.id, r.outcome) for r in ran] == [(handle.id, "completed")]
