"""Immediate mode: enqueue() runs the activity in this process once the enqueue commits."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from runnerq_django import ActivityFailed, get_handle, signal, storage
from runnerq_django.models import Activity
from runnerq_django.testing import WaitsForever, immediate
from tests.testing import handlers
from tests.testing.support import event_types


def status(handle) -> str:
    return handle.status()


def test_a_plain_handler_runs_at_once_and_its_result_reads_through_the_handle(runnerq_immediate):
    handle = handlers.double.enqueue({"n": 21})
    assert status(handle) == "completed"  # already: no worker ran it
    assert handle.result(timeout=0) == {"doubled": 42}
    assert event_types(handle.id) == []  # a worker records no event for a first-time success


def test_a_keyword_handler_runs_at_once_with_its_arguments(runnerq_immediate):
    handle = handlers.greet.enqueue(name="Ada", greeting="Hi")
    assert status(handle) == "completed"
    assert handle.result(timeout=0) == "Hi, Ada!"
    later = handlers.greet.using(queue="other").enqueue("Bob")  # positional, by the parameter's name
    assert later.queue == "other" and later.result(timeout=0) == "Hello, Bob!"


def test_inside_a_transaction_it_runs_when_the_transaction_commits(runnerq_immediate):
    with transaction.atomic():
        handle = handlers.double.enqueue({"n": 1})
        assert status(handle) == "pending"  # as a worker would see it: not before the commit
    assert status(handle) == "completed"


def test_a_rolled_back_enqueue_never_runs(runnerq_immediate):
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():
        handle = handlers.double.enqueue({"n": 1})
        raise RuntimeError("roll back")
    assert not Activity.objects.filter(id=handle.id).exists()


def test_steps_run_and_a_sleep_returns_at_once_advancing_the_activitys_clock(runnerq_immediate):
    handle = handlers.steps_and_sleep.enqueue({"n": 1})
    assert handle.result(timeout=0) == {"before": 2, "after": 20, "slept": True}
    # Parked and woken as under a worker (with INLINE_WAIT_SECONDS = 0), without the 3 s wait.
    assert event_types(handle.id) == ["Yielded"]


def test_children_run_the_same_way_and_are_awaited(runnerq_immediate):
    handle = handlers.parent.enqueue({"n": 2})
    assert handle.result(timeout=0) == {"sum": 4 + 9}
    children = Activity.objects.filter(parent_activity_id=handle.id)
    assert sorted(children.values_list("status", flat=True)) == ["completed", "completed"]


def test_a_signal_sent_before_the_commit_is_delivered(runnerq_immediate):
    with transaction.atomic():
        handle = handlers.approval.enqueue({})
        handle.signal("approved", {"by": "ann"})
    assert handle.result(timeout=0) == {"approved_by": "ann"}


def test_a_wait_for_a_signal_nobody_sent_raises_a_clear_error_and_a_later_signal_runs_it_on(
    runnerq_immediate,
):
    with pytest.raises(WaitsForever, match=r"tt\.approval .* waits for signal 'approved'") as caught:
        handlers.approval.enqueue({})
    handle = get_handle(caught.value.activity_id)
    assert status(handle) == "waiting"
    assert handle.signal("approved", {"by": "bob"}) is True
    assert handle.result(timeout=0) == {"approved_by": "bob"}


def test_a_wait_with_a_timeout_times_out_at_once(runnerq_immediate):
    handle = handlers.approval_with_timeout.enqueue({})
    with pytest.raises(ActivityFailed, match="SignalTimeout"):
        handle.result(timeout=0)
    assert status(handle) == "failed"


def test_retries_happen_at_once_up_to_max_attempts(runnerq_immediate):
    flaky = handlers.flaky.enqueue({})
    assert flaky.result(timeout=0) == {"attempt": 2}
    doomed = handlers.always_fails.enqueue({})
    assert status(doomed) == "dead_letter"
    assert event_types(doomed.id) == ["Retrying", "DeadLetter"]  # two attempts: max_attempts=2
    with pytest.raises(ActivityFailed, match="always fails"):
        doomed.result(timeout=0)


def test_a_delay_is_fast_forwarded(runnerq_immediate):
    handle = handlers.double.enqueue({"n": 3}, delay=3600)
    assert handle.result(timeout=0) == {"doubled": 6}


def test_an_enqueue_inside_a_handler_runs_too(runnerq_immediate):
    handle = handlers.enqueues_another.enqueue({"n": 5, "queue": "default"})
    inner = get_handle(handle.result(timeout=0)["enqueued"])
    assert inner.result(timeout=0) == {"doubled": 10}


def test_enqueue_many_runs_every_activity(runnerq_immediate):
    handles = handlers.double.enqueue_many([{"n": 1}, {"n": 2}])
    assert [h.result(timeout=0) for h in handles] == [{"doubled": 2}, {"doubled": 4}]


def test_the_decorator_form_and_the_setting(transactional_db):
    @immediate()
    def enqueue_under_decorator():
        return handlers.double.enqueue({"n": 4})

    assert enqueue_under_decorator().status() == "completed"
    assert handlers.double.enqueue({"n": 4}).status() == "pending"  # off again outside it
    with override_settings(RUNNERQ={"IMMEDIATE": True}):
        assert handlers.double.enqueue({"n": 4}).status() == "completed"


def test_the_setting_must_be_a_bool(settings):
    from runnerq_django import conf

    settings.RUNNERQ = {"IMMEDIATE": "yes"}
    assert "RUNNERQ['IMMEDIATE'] must be True or False, got 'yes'" in conf.validate()


def test_a_parent_stuck_on_a_child_that_waits_names_the_childs_signal(runnerq_immediate):
    with pytest.raises(WaitsForever, match=r"activity tt\.approval .* waits for signal 'approved'") as caught:
        handlers.awaits_approval.enqueue({})
    child = Activity.objects.get(id=caught.value.activity_id)
    assert child.depth == 1 and Activity.objects.get(id=child.parent_activity_id).status == "waiting"
    storage.signal("default", child.id, "approved", {"by": "dee"})  # not through the client: nothing runs
    assert Activity.objects.get(id=child.id).status == "pending"
    # The client runs the tree in immediate mode whether or not its signal woke the activity.
    assert signal(child.id, "approved", {"by": "dee"}) is False
    assert get_handle(child.parent_activity_id).result(timeout=0) == {"approved_by": "dee"}


def test_under_a_test_transaction_the_captured_callbacks_run_it(db, django_capture_on_commit_callbacks):
    with immediate(), django_capture_on_commit_callbacks(execute=True):
        handle = handlers.steps_and_sleep.enqueue({"n": 1})
        assert status(handle) == "pending"  # the test's transaction never commits
    assert handle.result(timeout=0) == {"before": 2, "after": 20, "slept": True}
