"""Rate limits: starts per fixed window in the storage layer, declarations, and with real
``runworker`` processes (20/s for 30 s over 3 workers)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from runnerq_django import activity
from runnerq_django.activities.concurrency import RateLimit
from runnerq_django.activities.registry import registry
from runnerq_django.storage import limits
from runnerq_django.storage.errors import InvalidArgument
from tests.flow import handlers
from tests.flow.conftest import ledger_rows
from tests.worker.support import fetch, wait_for_workers

Q = "flow_rates"


@pytest.mark.django_db(transaction=True)
def test_at_most_n_starts_per_window_then_more_in_the_next():
    handlers.rated.enqueue_many([{}] * 10, queue=Q)
    period = 2.0
    # Start just after a window boundary, so the two claims below fall in one window.
    now = fetch("SELECT extract(epoch FROM clock_timestamp())")[0][0]
    time.sleep(period - float(now) % period + 0.05)
    first = limits.claim_rated(Q, "flow.rated", 3, period, limit=10, lease_ms=60000)
    second = limits.claim_rated(Q, "flow.rated", 3, period, limit=10, lease_ms=60000)
    assert (len(first), len(second)) == (3, 0)
    time.sleep(period)
    assert len(limits.claim_rated(Q, "flow.rated", 3, period, limit=10, lease_ms=60000)) == 3
    # Past windows' rows are deleted by the claims.
    windows = fetch(
        "SELECT count(DISTINCT window_id) FROM runnerq_flow_rate_slots WHERE queue_name = %s", [Q]
    )
    assert windows == [(1,)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("20/s", (20, 1.0)), ("100/m", (100, 60.0)), ("5/h", (5, 3600.0)), ((7, "minute"), (7, 60.0))],
)
def test_rate_limit_spellings(spec, expected):
    rate = RateLimit.parse(spec)
    assert (rate.limit, rate.period_seconds) == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rate_limit": "20/d"}, "rate_limit"),
        ({"rate_limit": "x/s"}, "rate_limit"),
        ({"rate_limit": "0/s"}, "rate_limit"),
        ({"rate_limit": 20}, "rate_limit"),
        ({"rate_limit_key": "k"}, "rate_limit_key"),
        ({"rate_limit": "1/s", "concurrency": 2}, "rate_limit"),
    ],
)
def test_bad_rate_limits_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        activity(name="flow.t.bad_rate", **kwargs)(lambda payload: None)
    assert caught.value.field == field
    assert registry.get("flow.t.bad_rate") is None


@pytest.mark.slow
def test_20_per_second_for_30_seconds_over_3_workers(flow_worker):
    args = ("--queue", Q, "--concurrency", "16", "--poll-interval", "0.25")
    for _ in range(3):
        flow_worker(*args)
    wait_for_workers(Q, 3)
    handlers.rated.enqueue_many([{"seconds": 0}] * 1000, queue=Q)
    time.sleep(30)
    assert ledger_rows(), "no handler ran"
    # The claim's own time (started_at, the claim statement's now()), the clock the window is
    # taken on: a handler's start in the ledger lags its claim and can fall in the next second.
    starts = sorted(
        row[0]
        for row in fetch(
            "SELECT started_at FROM runnerq_activities WHERE queue_name = %s AND started_at IS NOT NULL", [Q]
        )
    )
    first = starts[0]
    # Starts per aligned window of one second (the database clock's whole seconds): the limit.
    per_window = Counter(int(s.timestamp()) for s in starts)
    assert max(per_window.values()) <= 20, per_window
    # Any one-second window, wherever it starts: at most twice the limit (two aligned windows).
    for index, start in enumerate(starts):
        inside = sum(1 for s in starts[index:] if (s - start).total_seconds() < 1.0)
        assert inside <= 40
    # Throughput: at least 90% of the limit over the whole windows of the run.
    seconds = int((starts[-1] - first).total_seconds())
    assert len(starts) >= 0.9 * 20 * seconds, (len(starts), seconds)
    assert seconds >= 25
