"""run_until_idle: the in-process worker for tests."""

from __future__ import annotations

from runnerq_django.models import Activity
from runnerq_django.testing import Ran, run_until_idle
from tests.testing import handlers
from tests.testing.support import event_types


def test_it_runs_what_is_due_and_returns_what_it_ran(runnerq_worker):
    first = handlers.double.enqueue({"n": 1})
    second = handlers.refuses.enqueue({})
    ran = runnerq_worker.run_until_idle()
    assert ran == [
        Ran(first.id, "tt.double", "default", 1, "completed"),
        Ran(second.id, "tt.refuses", "default", 1, "failed"),
    ]
    assert first.result(timeout=0) == {"doubled": 2}
    assert runnerq_worker.run_until_idle() == []  # idle now


def test_work_due_later_waits_unless_fast_forwarded(runnerq_worker):
    delayed = handlers.double.enqueue({"n": 2}, delay=3600)
    sleeper = handlers.steps_and_sleep.enqueue({"n": 1})
    flaky = handlers.flaky.enqueue({})
    ran = runnerq_worker.run_until_idle()
    assert {(r.id, r.outcome) for r in ran} == {(sleeper.id, "waiting"), (flaky.id, "retrying")}
    assert delayed.status() == "scheduled"

    ran = runnerq_worker.run_until_idle(fast_forward=True)
    assert {(r.id, r.outcome) for r in ran} == {
        (delayed.id, "completed"),
        (sleeper.id, "completed"),
        (flaky.id, "completed"),
    }
    assert sleeper.result(timeout=0) == {"before": 2, "after": 20, "slept": True}
    assert event_types(sleeper.id) == ["Yielded"]
    assert event_types(flaky.id) == ["Retrying"]


def test_a_wait_without_a_timer_is_left_waiting_even_when_fast_forwarding(runnerq_worker):
    handle = handlers.approval.enqueue({})
    assert [r.outcome for r in runnerq_worker.run_until_idle(fast_forward=True)] == ["waiting"]
    handle.signal("approved", {"by": "cy"})
    assert [r.outcome for r in runnerq_worker.run_until_idle()] == ["completed"]
    assert handle.result(timeout=0) == {"approved_by": "cy"}


def test_children_and_their_parent_run_to_the_end(runnerq_worker):
    handle = handlers.parent.enqueue({"n": 2})
    ran = runnerq_worker.run_until_idle()
    # wait_all parks once, on the last child: both children run before the parent's replay.
    assert [r.activity_type for r in ran] == ["tt.parent", "tt.child", "tt.child", "tt.parent"]
    assert handle.result(timeout=0) == {"sum": 13}


def test_queues_types_and_max_activities_limit_what_runs(runnerq_worker):
    other_queue = handlers.double.enqueue({"n": 1}, queue="other")
    refused = handlers.refuses.enqueue({})
    doubles = handlers.double.enqueue_many([{"n": 2}, {"n": 3}])
    assert [r.id for r in runnerq_worker.run_until_idle(types=["tt.double"], max_activities=1)] == [
        doubles[0].id
    ]
    assert [r.id for r in runnerq_worker.run_until_idle(types=["tt.double"])] == [doubles[1].id]
    assert refused.status() == "pending" and other_queue.status() == "pending"
    assert [r.id for r in run_until_idle(queues=["other"])] == [other_queue.id]
    assert Activity.objects.filter(status="pending").count() == 1  # only the refused one is left
