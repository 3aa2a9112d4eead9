"""Retry policies: each backoff's delays, jitter within its bounds, the retry decisions, bad
declarations, and a real worker applying them (sub-second delays, no_retry_on, retry_on)."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta

import pytest

from runnerq_django import NonRetryableError, activity
from runnerq_django.activities.registry import registry
from runnerq_django.retries import Backoff, RetryPolicy
from runnerq_django.spec.retry import retry_delay
from runnerq_django.storage.errors import InvalidArgument
from tests.flow import handlers
from tests.flow.conftest import ledger_rows
from tests.worker.support import events_of, row_of, wait_for_status


def test_no_jitter_doubles_from_the_base_and_stops_at_the_cap():
    backoff = Backoff(base=0.25, cap=3, jitter="none")
    assert [backoff.delay(n) for n in range(1, 8)] == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert backoff.delay(10_000) == 3.0  # huge retry numbers reach the cap without overflowing


def test_a_factor_of_one_is_a_constant_delay_and_other_factors_grow_by_it():
    assert [Backoff(base=0.5, factor=1).delay(n) for n in (1, 2, 50)] == [0.5, 0.5, 0.5]
    assert [Backoff(base=1, factor=3, cap=100).delay(n) for n in (1, 2, 3, 4, 5)] == [1, 3, 9, 27, 81]


@pytest.mark.parametrize(
    ("jitter", "low_share"),
    [("full", 0.0), ("equal", 0.5)],
)
def test_jitter_stays_within_its_bounds_and_spreads_over_them(jitter, low_share):
    backoff = Backoff(base=1, cap=16, jitter=jitter)
    rng = random.Random(7)
    for retry in range(1, 8):
        top = min(16.0, 2.0 ** (retry - 1))
        assert backoff.bounds(retry) == (top * low_share, top)
        draws = [backoff.delay(retry, rng) for _ in range(2000)]
        assert all(top * low_share <= d <= top for d in draws)
        # Spread over the whole range, not stuck at one end: both outer fifths are reached.
        span = top * (1 - low_share)
        assert min(draws) < top * low_share + span / 5
        assert max(draws) > top - span / 5


def test_jitter_none_has_no_spread():
    assert Backoff(base=2, cap=8).bounds(3) == (8.0, 8.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base": 0}, "backoff.base"),
        ({"base": -1}, "backoff.base"),
        ({"base": float("nan")}, "backoff.base"),
        ({"base": "1"}, "backoff.base"),
        ({"cap": 31 * 86400}, "backoff.cap"),
        ({"base": 10, "cap": 5}, "backoff.cap"),
        ({"factor": 0.5}, "backoff.factor"),
        ({"factor": 101}, "backoff.factor"),
        ({"jitter": "half"}, "backoff.jitter"),
    ],
)
def test_bad_backoffs_are_refused_naming_the_field_and_the_limit(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        Backoff(**kwargs)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_a_timedelta_base_is_accepted():
    assert Backoff(base=timedelta(milliseconds=200), cap=timedelta(seconds=1)).delay(1) == 0.2


class Transient(Exception):
    pass


class Permanent(Transient):
    pass


def test_decisions_of_each_policy():
    default = RetryPolicy.build()
    assert default.retryable(ValueError()) and default.retryable(Transient())
    assert not default.retryable(NonRetryableError("no"))

    only = RetryPolicy.build(retry_on=(Transient, ConnectionError))
    assert only.retryable(Transient()) and only.retryable(ConnectionResetError())
    assert not only.retryable(ValueError())
    assert not only.retryable(NonRetryableError("never, even if listed"))

    never = RetryPolicy.build(no_retry_on=KeyError)
    assert not never.retryable(KeyError()) and never.retryable(ValueError())

    # no_retry_on wins over retry_on for an exception in both (a subclass listed as permanent).
    both = RetryPolicy.build(retry_on=Transient, no_retry_on=Permanent)
    assert both.retryable(Transient()) and not both.retryable(Permanent())


def test_a_policy_without_backoff_keeps_the_spec_delay():
    assert RetryPolicy.build(retry_on=ValueError).delay_seconds(0) is None
    assert RetryPolicy.build(backoff=Backoff(base=0.1)).delay_seconds(2) == pytest.approx(0.4)


def test_bad_exception_lists_are_refused():
    with pytest.raises(InvalidArgument, match="retry_on"):
        RetryPolicy.build(retry_on=("ValueError",))
    with pytest.raises(InvalidArgument, match="no_retry_on"):
        RetryPolicy.build(no_retry_on=(int,))
    with pytest.raises(InvalidArgument, match="backoff"):
        RetryPolicy.build(backoff=2)


def test_the_decorator_attaches_the_policy_and_leaves_the_enqueue_defaults_alone():
    try:

        @activity(name="flow.t.decorated", retry_on=ConnectionError, backoff=Backoff(base=0.5))
        def decorated(payload):
            return payload

        assert decorated.retry_policy.retry_on == (ConnectionError,)
        assert decorated.retry_policy.backoff == Backoff(base=0.5)
        # The row keeps the spec's columns: other SDKs retrying it use the spec's backoff.
        assert decorated.options.retry_delay_seconds == 1
        plain = registry.get("flow.spec_backoff")
        assert plain.retry_policy == RetryPolicy()
    finally:
        registry.unregister("flow.t.decorated")


def test_the_spec_backoff_is_unchanged():
    # The spec's vectors are in tests/spec; this pins the formula the default policy leaves alone.
    assert [retry_delay(n, 1, 0) for n in range(4)] == [2, 4, 8, 16]


FAST = ("--poll-interval", "0.2", "--concurrency", "4")


@pytest.mark.slow
def test_a_real_worker_applies_the_policies(flow_worker):
    retried = handlers.policy.enqueue({"raise": "connection"})
    permanent = handlers.policy.enqueue({"raise": "key"})
    unlisted = handlers.policy.enqueue({"raise": "value"})
    spec = handlers.spec_backoff.enqueue({"raise": "connection"})
    flow_worker(*FAST)

    assert wait_for_status(retried.id, "dead_letter", timeout=30) == "dead_letter"
    starts = [r[5] for r in ledger_rows(retried.id)]
    assert len(starts) == 3
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # 0.3 s then 0.6 s (the cap), plus at most a poll interval and scheduling slack; far below the
    # spec's 2 s and 4 s.
    assert 0.3 <= gaps[0] < 1.5 and 0.6 <= gaps[1] < 1.8, gaps

    assert wait_for_status(permanent.id, "failed") == "failed"
    assert wait_for_status(unlisted.id, "failed") == "failed"
    assert len(ledger_rows(permanent.id)) == 1 and len(ledger_rows(unlisted.id)) == 1
    assert events_of(permanent.id) == ["Failed"]

    assert wait_for_status(spec.id, "dead_letter", timeout=30) == "dead_letter"
    spec_starts = [r[5] for r in ledger_rows(spec.id)]
    assert (spec_starts[1] - spec_starts[0]).total_seconds() >= 2.0  # the spec's 2 x retry_delay
    assert row_of(spec.id)["retry_delay_seconds"] == 1
