"""runnerq_enqueued: assertions about what was enqueued, read from the stored rows."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from runnerq_django import enqueue
from runnerq_django.testing import Enqueued
from tests.testing import handlers


def test_it_sees_only_what_was_enqueued_since_it_was_made(transactional_db):
    handlers.double.enqueue({"n": 0})
    enqueued = Enqueued()
    assert enqueued.all() == []
    handle = handlers.double.enqueue(
        {"n": 1, "meta": {"a": 1, "b": 2}}, queue="emails", delay=60, idempotency_key="order-1", priority=3
    )
    [item] = enqueued.all()
    assert (item.id, item.payload, item.queue, item.priority) == (
        handle.id,
        {"n": 1, "meta": {"a": 1, "b": 2}},
        "emails",
        3,
    )
    assert item.delay_seconds == pytest.approx(60, abs=1)


def test_each_criterion_matches_and_refuses(runnerq_enqueued):
    handlers.double.enqueue(
        {"n": 1, "meta": {"a": 1, "b": 2}}, queue="emails", delay=60, idempotency_key="order-1"
    )
    enqueue("other.language.type", {"x": 1})
    found = runnerq_enqueued.assert_enqueued(
        1,
        type=handlers.double,
        payload_contains={"meta": {"a": 1}},
        queue="emails",
        delay=timedelta(minutes=1),
        idempotency_key="order-1",
    )
    assert found[0].activity_type == "tt.double"
    runnerq_enqueued.assert_enqueued(
        type="other.language.type", payload={"x": 1}, delay=0, idempotency_key=None
    )
    for wrong in (
        {"type": handlers.refuses},
        {"payload_contains": {"meta": {"a": 2}}},
        {"queue": "default", "type": handlers.double},
        {"delay": 120},
        {"idempotency_key": "order-2"},
        {"payload": {"n": 1}},
    ):
        runnerq_enqueued.assert_not_enqueued(**wrong)


def test_a_failed_assertion_says_what_was_enqueued(runnerq_enqueued):
    handlers.double.enqueue({"n": 7})
    with pytest.raises(
        AssertionError,
        match=r"expected an activity enqueued matching type='tt.refuses', found 0; "
        r"enqueued: tt.double on 'default' payload=\{'n': 7\}",
    ):
        runnerq_enqueued.assert_enqueued(type="tt.refuses")
    with pytest.raises(
        AssertionError, match=re.escape("expected 2 activities enqueued matching type='tt.double', found 1")
    ):
        runnerq_enqueued.assert_enqueued(2, type="tt.double")
    with pytest.raises(AssertionError, match="expected nothing enqueued matching anything, found 1"):
        runnerq_enqueued.assert_not_enqueued()
