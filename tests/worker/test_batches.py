"""Batch handlers (``@activity(batch=BatchOptions(...))``; docs/how-to/batches.md): real
``runworker`` processes, the outcome read from the database. Each item keeps its own life: a
failing item is retried or dead-lettered alone, with its own events."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from runnerq_django import BatchOptions, activity
from runnerq_django.storage.errors import InvalidArgument
from tests.helpers import wait_until
from tests.worker import batch_handlers as bh
from tests.worker.support import events_of, fetch, runs, status_of, worker_processes

FAST = ("--poll-interval", "0.2", "--lease", "10")


@pytest.fixture
def batch_worker(live_db_url, runs_table, tmp_path):
    with worker_processes(live_db_url, tmp_path, "tests.worker.batch_handlers") as start:
        yield start


def settled(ids, *statuses) -> int:
    return fetch(
        "SELECT count(*) FROM runnerq_activities WHERE status = ANY(%s) AND id = ANY(%s::uuid[])",
        [list(statuses), [str(i) for i in ids]],
    )[0][0]


def calls() -> dict[str, list[tuple]]:
    """Handler call -> its (activity id, attempt) rows, from rq_test_runs."""
    found: dict[str, list[tuple]] = defaultdict(list)
    for activity_id, what, attempt, _pid in runs():
        found[what].append((activity_id, attempt))
    return found


def assert_sizes_recorded(found) -> list[int]:
    """Each call recorded as many rows as it had items; the sizes."""
    sizes = []
    for what, rows in found.items():
        assert int(what.rsplit(":", 1)[1]) == len(rows)
        sizes.append(len(rows))
    return sizes


def wait_settled(ids, *statuses, timeout=90):
    wait_until(
        lambda: settled(ids, *statuses) == len(ids), timeout=timeout, message=f"all {len(ids)} {statuses}"
    )


@pytest.mark.slow
def test_a_batch_with_one_failing_item_retries_only_that_item(batch_worker):
    payloads = [{"n": n, "fail_first": n == 3} for n in range(12)]
    handles = bh.flaky.enqueue_many(payloads)
    batch_worker(*FAST, "--concurrency", "8")
    ids = [h.id for h in handles]
    wait_settled(ids, "completed")
    found = calls()
    sizes = assert_sizes_recorded(found)
    assert max(sizes) <= 5  # max_size
    assert max(sizes) > 1  # they did run together
    per_activity = Counter(str(activity_id) for rows in found.values() for activity_id, _ in rows)
    failing = str(handles[3].id)
    assert per_activity[failing] == 2  # the first attempt failed by name, the second completed
    assert all(per_activity[str(i)] == 1 for i in ids if str(i) != failing)  # the rest once each
    assert events_of(handles[3].id) == ["Retrying"]
    assert all(events_of(h.id) == [] for h in handles if h is not handles[3])
    assert [h.result(timeout=5) for h in handles] == [{"n": n} for n in range(12)]
    row = fetch("SELECT retry_count, last_error FROM runnerq_activities WHERE id = %s", [handles[3].id])[0]
    assert row[0] == 1 and "item 3 refused" in row[1] and "BatchFailed" in row[1]


@pytest.mark.slow
def test_every_activity_of_a_burst_completes_exactly_once_in_batches_of_at_most_max_size(batch_worker):
    handles = bh.echo.enqueue_many([{"n": n} for n in range(60)])
    batch_worker(*FAST, "--concurrency", "16")
    batch_worker(*FAST, "--concurrency", "16")  # two processes compete for the same activities
    ids = [h.id for h in handles]
    wait_settled(ids, "completed")
    found = calls()
    sizes = assert_sizes_recorded(found)
    assert max(sizes) <= 5 and sum(sizes) == 60
    assert sorted(str(a) for rows in found.values() for a, _ in rows) == sorted(str(i) for i in ids)
    assert [h.result(timeout=5) for h in handles] == [{"n": n, "attempt": 1} for n in range(60)]


@pytest.mark.slow
def test_a_poisoned_item_is_dead_lettered_alone_and_a_fatal_one_fails_at_once(batch_worker):
    payloads = [{"n": n, "poison": n == 1, "fatal": n == 2} for n in range(5)]
    handles = bh.poison.enqueue_many(payloads)
    batch_worker(*FAST, "--concurrency", "8")
    wait_settled([handles[1].id], "dead_letter")
    wait_settled([handles[2].id], "failed")
    ok = [h.id for n, h in enumerate(handles) if n not in (1, 2)]
    wait_settled(ok, "completed")
    assert events_of(handles[1].id) == ["Retrying", "DeadLetter"]
    assert events_of(handles[2].id) == ["Failed"]
    assert all(events_of(i) == [] for i in ok)
    per_activity = Counter(str(a) for a, _what, _at, _pid in runs())
    assert per_activity[str(handles[1].id)] == 2  # max_attempts=2
    assert per_activity[str(handles[2].id)] == 1  # NonRetryableError: no retry
    assert all(per_activity[str(i)] == 1 for i in ok)
    assert status_of(handles[0].id) == "completed"


@pytest.mark.slow
def test_a_handler_that_raises_fails_every_item_of_its_batch(batch_worker):
    handles = bh.raises.enqueue_many([{"n": n} for n in range(4)])
    batch_worker(*FAST, "--concurrency", "8")
    ids = [h.id for h in handles]
    wait_settled(ids, "completed")
    for handle in handles:
        assert events_of(handle.id) == ["Retrying"]
        assert [at for _a, _w, at, _p in runs(activity_id=handle.id)] == [1, 2]


@pytest.mark.slow
def test_a_concurrency_limit_counts_activities_not_batches(batch_worker):
    handles = bh.limited.enqueue_many([{"n": n} for n in range(10)])
    batch_worker(*FAST, "--concurrency", "8")
    wait_settled([h.id for h in handles], "completed")
    sizes = assert_sizes_recorded(calls())
    assert max(sizes) <= 2 and sum(sizes) == 10  # concurrency=2: two activities at once


def test_batch_options_are_bounded_naming_the_field_and_the_limit():
    with pytest.raises(InvalidArgument) as raised:
        BatchOptions(max_size=0)
    assert "batch.max_size" in str(raised.value) and "1" in str(raised.value)
    with pytest.raises(InvalidArgument) as raised:
        BatchOptions(max_size=1001)
    assert "batch.max_size" in str(raised.value) and "1000" in str(raised.value).replace(",", "")
    with pytest.raises(InvalidArgument) as raised:
        BatchOptions(max_wait=timedelta(minutes=2))
    assert "batch.max_wait" in str(raised.value) and "60" in str(raised.value)
    assert BatchOptions(max_size=3, max_wait=timedelta(milliseconds=250)).max_wait_seconds == 0.25


def test_a_batch_handler_is_a_sync_function_of_its_items():
    with pytest.raises(InvalidArgument, match="batch"):
        activity(name="tb.bad_async", batch=BatchOptions())(_async_items)
    with pytest.raises(InvalidArgument, match="one parameter"):
        activity(name="tb.bad_ctx", batch=BatchOptions())(lambda ctx, items: None)
    with pytest.raises(InvalidArgument, match="isolation"):
        activity(name="tb.bad_process", batch=BatchOptions(), isolation="process")(lambda items: None)
    with pytest.raises(InvalidArgument, match="BatchOptions"):
        activity(name="tb.bad_value", batch={"max_size": 3})(lambda items: None)


async def _async_items(items):
    return None


# the testing toolkit -----------------------------------------------------------------------------


def test_run_until_idle_runs_due_items_together_and_retries_only_the_failed_one(runs_table):
    from runnerq_django.testing import run_until_idle

    handles = bh.flaky.enqueue_many([{"n": n, "fail_first": n == 1} for n in range(7)])
    ran = run_until_idle(types=["tb.flaky"])
    # retry_delay=0: the failed item is due again at once, and runs in the next batch.
    assert [(r.attempt, r.outcome) for r in ran if r.id == handles[1].id] == [
        (1, "retrying"),
        (2, "completed"),
    ]
    assert sorted((r.id, r.attempt, r.outcome) for r in ran if r.id != handles[1].id) == sorted(
        (h.id, 1, "completed") for h in handles if h is not handles[1]
    )
    sizes = assert_sizes_recorded(calls())
    assert sorted(sizes) == [3, 5]  # max_size 5, then the 2 left with the retry: claimed together
    assert run_until_idle(types=["tb.flaky"]) == []
    assert [h.result(timeout=0) for h in handles] == [{"n": n} for n in range(7)]


def test_immediate_mode_runs_a_batch_handler_at_once_with_a_batch_of_one(runs_table):
    from runnerq_django.testing import immediate

    with immediate():
        handle = bh.echo.enqueue({"n": 4})
    assert handle.status() == "completed"  # already, without waiting max_wait
    assert handle.result(timeout=0) == {"n": 4, "attempt": 1}
    assert assert_sizes_recorded(calls()) == [1]


# leases, cancellation, time limits: per activity -------------------------------------------------


@pytest.mark.slow
def test_a_member_cancelled_while_its_batch_gathers_is_left_out_of_the_call(batch_worker):
    from runnerq_django import cancel

    kept, cancelled = bh.gathering.enqueue_many([{"n": 1}, {"n": 2}])
    batch_worker("--poll-interval", "0.2", "--lease", "3", "--concurrency", "8")
    wait_until(
        lambda: status_of(kept.id) == status_of(cancelled.id) == "processing",
        timeout=90,  # the worker's start-up on a loaded machine, then a claim
        message="both claimed, gathering",
    )
    cancel(cancelled.id)
    assert kept.result(timeout=30) == {"n": 1}
    assert status_of(cancelled.id) == "cancelled"
    assert [(str(a), what.rsplit(":", 1)[1]) for a, what, _at, _p in runs()] == [(str(kept.id), "1")]


@pytest.mark.slow
def test_each_member_keeps_its_timeout(batch_worker):
    handles = bh.slow.enqueue_many([{"n": n} for n in range(3)])
    batch_worker("--poll-interval", "0.2", "--lease", "3", "--concurrency", "8")
    wait_settled([h.id for h in handles], "dead_letter", timeout=90)
    for handle in handles:
        row = fetch("SELECT last_error FROM runnerq_activities WHERE id = %s", [handle.id])[0]
        assert "ActivityTimedOut" in row[0] or "BatchInterrupted" in row[0]
    errors = [fetch("SELECT last_error FROM runnerq_activities WHERE id = %s", [h.id])[0][0] for h in handles]
    assert any("ActivityTimedOut" in e for e in errors)  # the members' own time limits stopped it


def test_a_batch_is_one_span_linked_to_each_member_attempt_span(runs_table):
    from opentelemetry import trace

    from runnerq_django.testing import run_until_idle
    from tests.tracing.exporter import install, uninstall

    exporter = install()
    exporter.clear()
    try:
        handles = bh.echo.enqueue_many([{"n": n} for n in range(3)])
        run_until_idle(types=["tb.echo"])
        spans = exporter.get_finished_spans()
    finally:
        exporter.clear()
        uninstall()
    attempts = {
        s.attributes["messaging.message.id"]: s.get_span_context().span_id
        for s in spans
        if s.kind == trace.SpanKind.CONSUMER
    }
    assert set(attempts) == {str(h.id) for h in handles}
    [batch] = [s for s in spans if s.name == "batch tb.echo"]
    assert batch.attributes["runnerq.batch.size"] == 3
    assert sorted(link.context.span_id for link in batch.links) == sorted(attempts.values())
    assert batch.parent.span_id in attempts.values()  # inside the attempt of the thread that ran it
