"""The live console's rollups: what roll_up counts (outcomes per minute and type, latency,
depth), that a second run recomputes instead of adding, that queues stay apart, and pruning."""

from __future__ import annotations

import random
from datetime import timedelta

from runnerq_django import storage
from runnerq_django.storage import console, reads
from runnerq_django.storage.sql.console import BUCKET_COLUMNS, LATENCY_BOUNDS_MS
from tests.storage.support import backdate, claim_one, sql_rows, sql_value, submit, submit_and_claim


def finish(queue: str, activity_type: str, outcome: str, **fields) -> None:
    settle(queue, submit_and_claim(queue, activity_type, **fields), outcome)


def settle(queue: str, claim, outcome: str) -> None:
    if outcome == "completed":
        storage.complete(queue, claim, 1)
    else:
        assert storage.fail(queue, claim, "x", retryable=outcome == "dead_letter") == outcome


def rollups(queue: str, span: int = 1) -> dict[str, tuple]:
    rows = sql_rows(
        "SELECT activity_type, sum(completed), sum(failed), sum(dead_lettered), sum(latency_count) "
        "FROM runnerq_console_minutes WHERE queue_name = %s AND span_minutes = %s GROUP BY activity_type",
        [queue, span],
    )
    return {r[0]: tuple(int(v) for v in r[1:]) for r in rows}


def test_outcomes_latency_and_depth_of_the_last_minutes(queue):
    finish(queue, "a", "completed")
    finish(queue, "a", "completed")
    finish(queue, "b", "failed")
    finish(queue, "b", "dead_letter", max_retries=1)
    submit(queue, "c")  # due
    submit(queue, "c", delay_seconds=3600)  # scheduled
    other = queue + "_other"
    finish(other, "a", "completed")

    assert console.roll_up(queue) == 2  # one row per (minute, type) when all finished this minute
    assert rollups(queue) == {"a": (2, 0, 0, 2), "b": (0, 1, 1, 2)}
    assert rollups(other) == {}
    due, scheduled, processing = sql_rows(
        "SELECT due, scheduled, processing FROM runnerq_console_depth WHERE queue_name = %s", [queue]
    )[0]
    assert (due, scheduled, processing) == (1, 1, 0)

    finish(queue, "a", "completed")
    console.roll_up(queue)  # recomputed, not added
    assert rollups(queue) == {"a": (3, 0, 0, 3), "b": (0, 1, 1, 2)}
    assert rollups(queue, span=10) == rollups(queue)  # the ten-minute sums the day's charts read
    assert rollups(queue, span=60) == rollups(queue)  # the hourly sums the day's types table reads
    assert rollups(queue, span=-1) == rollups(queue, span=-10) == {"": (3, 1, 1, 5)}  # the totals


def test_latency_is_start_minus_due_time_in_the_histogram(queue):
    activity_id = submit(queue, "slow")
    sql_rows(
        "UPDATE runnerq_activities SET created_at = now() - interval '3 seconds' WHERE id = %s RETURNING id",
        [activity_id],
    )
    claim = submit_and_claim(queue, "fast")
    storage.complete(queue, claim, 1)
    from tests.storage.support import claim_one

    storage.complete(queue, claim_one(queue, "slow"), 1)
    console.roll_up(queue)
    columns = ", ".join(BUCKET_COLUMNS)
    rows = {
        activity_type: {i: n for i, n in enumerate(counts) if n}
        for activity_type, *counts in sql_rows(
            f"SELECT activity_type, {columns} FROM runnerq_console_minutes WHERE queue_name = %s", [queue]
        )
    }
    # 3 s waiting: the bucket from 2500 to 5000 ms (the index of 5000 in the bounds).
    assert rows["slow"] == {LATENCY_BOUNDS_MS.index(5000): 1}
    assert sum(rows["fast"].values()) == 1 and next(iter(rows["fast"])) <= LATENCY_BOUNDS_MS.index(250)
    alias = "default"
    now = reads.database_now(alias)
    series, per_queue = console.outcomes(alias, now - timedelta(hours=1), 3600, queue)
    per_type, other = console.types(alias, now - timedelta(hours=1), 3600, queue, 50)
    by_type = {r[1]: r for r in per_type}
    assert set(by_type) == {"fast", "slow"} and other is None
    assert 3000 <= by_type["slow"][7] < 5000  # the maximum
    assert sum(by_type["slow"][8].values()) == 1
    assert [r[:4] for r in per_queue] == [(queue, 2, 0, 0)]
    (bin_row,) = series
    assert bin_row[1:4] == (2, 0, 0)
    assert sum(bin_row[7].values()) == 2


def test_prune_deletes_old_rollups_only(queue):
    finish(queue, "a", "completed")
    console.roll_up(queue)
    sql_rows(
        "INSERT INTO runnerq_console_minutes (minute, queue_name, activity_type, completed, failed, "
        "dead_lettered) VALUES (date_trunc('minute', now()) - interval '3 days', %s, 'a', 1, 0, 0) RETURNING 1",
        [queue],
    )
    assert (
        sql_value("SELECT count(*) FROM runnerq_console_minutes WHERE queue_name = %s", [queue]) == 6
    )  # a minute, its ten, their queue totals, its hour, the old one
    assert console.prune(2 * 86400) >= 1
    assert rollups(queue) == {"a": (1, 0, 0, 1)}


def test_each_minute_and_type_adds_up_its_rows(queue):
    """The rollup counts by (minute, type, status, bucket) first, then spreads the groups into
    the columns: every column equals what the rows give, counted one by one here."""
    rnd = random.Random(7)
    for index in range(60):
        activity_type = ("a", "b", "c")[index % 3]
        outcome = rnd.choice(("completed", "completed", "failed", "dead_letter"))
        activity_id = submit(queue, activity_type, max_retries=1 if outcome == "dead_letter" else 3)
        backdate(activity_id, "created_at", rnd.choice((0.001, 0.02, 0.3, 4, 40, 400)))
        settle(queue, claim_one(queue, activity_type), outcome)
    console.roll_up(queue)
    bounds = list(LATENCY_BOUNDS_MS)
    expected: dict = {}
    for minute, activity_type, status, latency, bucket in sql_rows(
        """SELECT date_trunc('minute', completed_at), activity_type, status,
                  GREATEST(0, extract(epoch FROM started_at - COALESCE(scheduled_at, created_at)) * 1000),
                  width_bucket(GREATEST(0, extract(epoch FROM started_at - COALESCE(scheduled_at, created_at)) * 1000),
                               %s::float8[])
             FROM runnerq_activities WHERE queue_name = %s AND status IN ('completed', 'failed', 'dead_letter')""",
        [bounds, queue],
    ):
        row = expected.setdefault((minute, activity_type), [0, 0, 0, 0, 0.0, 0.0] + [0] * len(BUCKET_COLUMNS))
        row[("completed", "failed", "dead_letter").index(status)] += 1
        row[3] += 1
        row[4] += float(latency)
        row[5] = max(row[5], float(latency))
        row[6 + bucket] += 1
    got = {
        (minute, activity_type): [
            *map(int, counts[:4]),
            float(counts[4]),
            float(counts[5]),
            *map(int, counts[6:]),
        ]
        for minute, activity_type, *counts in sql_rows(
            "SELECT minute, activity_type, completed, failed, dead_lettered, latency_count, latency_sum_ms, "
            f"latency_max_ms, {', '.join(BUCKET_COLUMNS)} FROM runnerq_console_minutes "
            "WHERE queue_name = %s AND span_minutes = 1",
            [queue],
        )
    }
    assert got.keys() == expected.keys() and sum(sum(row[:3]) for row in got.values()) == 60
    for key, row in expected.items():
        assert got[key][:4] == row[:4] and got[key][6:] == row[6:], key
        assert abs(got[key][4] - row[4]) < 1 and abs(got[key][5] - row[5]) < 1, key


def test_rollups_written_before_the_queue_totals_get_theirs(queue):
    """The series read each queue's totals (span -1 and -10); a rollup finds older rows without
    them (written before they existed) and sums them too."""
    sql_rows(
        "INSERT INTO runnerq_console_minutes (span_minutes, minute, queue_name, activity_type, completed, failed)"
        " SELECT s, date_bin(make_interval(mins => s), now() - interval '5 hours', timestamptz '2000-01-01'),"
        " %s, t, 2, 1 FROM unnest(ARRAY[1, 10]) s, unnest(ARRAY['a', 'b']) t RETURNING 1",
        [queue],
    )
    console.roll_up(queue)
    totals = sql_rows(
        "SELECT span_minutes, activity_type, completed, failed FROM runnerq_console_minutes"
        " WHERE queue_name = %s AND span_minutes < 0 ORDER BY 1",
        [queue],
    )
    assert [(s, t, int(c), int(f)) for s, t, c, f in totals] == [(-10, "", 4, 2), (-1, "", 4, 2)]
    assert rollups(queue, span=60) == {"a": (2, 1, 0, 0), "b": (2, 1, 0, 0)}  # from the ten-minute rows
