"""Benchmark: the admin console's server time on a table of 1,000,000 activities.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/admin.py [--rows N] [--keep]

Creates a scratch database on the server of ``DATABASE_URL``, migrates it, fills it with
``INSERT ... SELECT generate_series`` (activities with inputs, results and events in a realistic
mix: mostly completed, a backlog, failures, dead letters, trees of children), runs ``VACUUM
ANALYZE``, then times the admin views with Django's test ``Client`` as a logged-in superuser.
The client runs the view in-process, so the time measured is the server's: URL routing,
middleware, the view, its SQL and template rendering (no network, no browser).

Two rounds: a healthy queue (94% completed), then a big backlog (half of the completed
activities made pending again, ~490,000 runnable rows) -- the moment an operator opens the
console. Prints the setup and, per view, the median and the worst of ``--repeat`` requests, the
number of SQL queries and the rows on the page. ``--keep`` keeps the database (its name is printed) and ``--database NAME``
reuses a kept one without filling it again.

Between them, the live console over ``--types`` activity types (5,000 by default: 720,000
ten-minute rollup rows and 600,000 minute rows), whose rows are deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUEUES = (("default", 70), ("emails", 20), ("reports", 10))
TYPES = (
    "SendEmail",
    "ChargeCard",
    "RenderReport",
    "SyncInventory",
    "ResizeImage",
    "Webhook",
    "Backfill",
    "Notify",
)
# Status mix per 1000 rows; the rest are completed.
MIX = (
    ("pending", 20),
    ("scheduled", 10),
    ("retrying", 5),
    ("processing", 2),
    ("waiting", 3),
    ("failed", 10),
    ("dead_letter", 5),
    ("cancelled", 5),
)

FILL_SQL = """
INSERT INTO runnerq_activities (
    id, queue_name, activity_type, priority, status, created_at, scheduled_at, started_at, completed_at,
    lease_deadline_ms, current_worker_id, last_worker_id, retry_count, max_retries, timeout_seconds,
    retry_delay_seconds, max_retry_delay_seconds, last_error, last_error_at, metadata, idempotency_key,
    parent_activity_id, root_activity_id, depth, waiting_result_id)
SELECT md5('a' || g)::uuid,
       CASE WHEN s.h < 70 THEN 'default' WHEN s.h < 90 THEN 'emails' ELSE 'reports' END,
       (ARRAY['SendEmail','ChargeCard','RenderReport','SyncInventory','ResizeImage','Webhook','Backfill','Notify'])[1 + g % 8],
       1 + g % 4,
       s.status,
       s.created,
       CASE WHEN s.status IN ('scheduled','retrying','waiting') THEN now() + ((g % 3600) || ' seconds')::interval END,
       CASE WHEN s.status NOT IN ('pending','scheduled') THEN s.created + interval '1 second' END,
       CASE WHEN s.status IN ('completed','failed','dead_letter','cancelled') THEN s.created + ((1 + g % 30) || ' seconds')::interval END,
       CASE WHEN s.status = 'processing' THEN (extract(epoch FROM now()) * 1000)::bigint + 30000 END,
       CASE WHEN s.status = 'processing' THEN 'bench-pool/' || (g % 16) || '/' || g END,
       CASE WHEN s.status NOT IN ('pending','scheduled','processing') THEN 'bench-pool/' || (g % 16) || '/' || g END,
       CASE WHEN s.status IN ('retrying','dead_letter') THEN 2 ELSE 0 END,
       3, 300, 1, 0,
       CASE WHEN s.status IN ('retrying','failed','dead_letter') THEN 'ConnectionError: upstream timed out after 30s' END,
       CASE WHEN s.status IN ('retrying','failed','dead_letter') THEN s.created + interval '2 seconds' END,
       NULL,
       CASE WHEN g % 5 = 0 THEN 'rq:key:v2:' || rtrim(encode(convert_to(length('order-' || g) || ':order-' || g
            || (ARRAY['SendEmail','ChargeCard','RenderReport','SyncInventory','ResizeImage','Webhook','Backfill','Notify'])[1 + g % 8], 'UTF8'), 'base64'), '=') END,
       CASE WHEN g % 10 = 1 THEN md5('a' || (g - 1))::uuid END,
       CASE WHEN g % 10 = 1 THEN md5('a' || (g - 1))::uuid ELSE md5('a' || g)::uuid END,
       CASE WHEN g % 10 = 1 THEN 1 ELSE 0 END,
       NULL
FROM generate_series(1, %(rows)s) AS g,
LATERAL (SELECT now() - ((%(rows)s - g) * (604800.0 / %(rows)s) || ' seconds')::interval AS created,
                CASE WHEN g % 1000 < 20 THEN 'pending' WHEN g % 1000 < 30 THEN 'scheduled'
                     WHEN g % 1000 < 35 THEN 'retrying' WHEN g % 1000 < 37 THEN 'processing'
                     WHEN g % 1000 < 40 THEN 'waiting' WHEN g % 1000 < 50 THEN 'failed'
                     WHEN g % 1000 < 55 THEN 'dead_letter' WHEN g % 1000 < 60 THEN 'cancelled'
                     ELSE 'completed' END AS status,
                abs(hashtext(g::text)) % 100 AS h) s
"""

KEYS_SQL = """
INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id)
SELECT queue_name, idempotency_key, id FROM runnerq_activities WHERE idempotency_key IS NOT NULL
"""

INPUTS_SQL = """
INSERT INTO runnerq_inputs (activity_id, queue_name, payload)
SELECT id, queue_name, jsonb_build_object('order_id', left(id::text, 8), 'amount_cents', 1999, 'currency', 'EUR')
FROM runnerq_activities
"""

RESULTS_SQL = """
INSERT INTO runnerq_results (activity_id, queue_name, state, data, created_at, owner_activity_id, step)
SELECT id, queue_name,
       CASE WHEN status = 'completed' THEN 'Ok' ELSE 'Err' END,
       CASE WHEN status = 'completed' THEN jsonb_build_object('ok', true)
            ELSE jsonb_build_object('error', coalesce(last_error, 'activity cancelled'), 'type',
                 CASE status WHEN 'failed' THEN 'non_retryable' ELSE status END) END,
       completed_at, id, NULL
FROM runnerq_activities WHERE status IN ('completed','failed','dead_letter','cancelled')
"""

# Every activity that failed an attempt has its history: retries, then the terminal event.
EVENTS_SQL = """
INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail, created_at)
SELECT a.id, a.queue_name, e.event_type, a.last_worker_id, e.detail, a.created_at + e.after
FROM runnerq_activities a,
LATERAL (VALUES
    ('Retrying', jsonb_build_object('started_at', to_char(a.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'error', 'ConnectionError: upstream timed out after 30s', 'retry_count', 1,
        'scheduled_at', to_char((a.created_at + interval '2 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
        interval '1 second'),
    ('Retrying', jsonb_build_object('started_at', to_char(a.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'error', 'ConnectionError: upstream timed out after 30s', 'retry_count', 2,
        'scheduled_at', to_char((a.created_at + interval '4 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
        interval '3 seconds')
) AS e(event_type, detail, after)
WHERE a.status IN ('retrying', 'dead_letter', 'failed') OR (a.status = 'completed' AND hashtext(a.id::text) % 20 = 0)
"""

TERMINAL_EVENTS_SQL = """
INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail, created_at)
SELECT id, queue_name,
       CASE status WHEN 'dead_letter' THEN 'DeadLetter' WHEN 'failed' THEN 'Failed' ELSE 'Cancelled' END,
       CASE WHEN status = 'cancelled' THEN NULL ELSE last_worker_id END,
       CASE status
         WHEN 'dead_letter' THEN jsonb_build_object('started_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                                    'error', last_error, 'reason', 'attempts_exhausted')
         WHEN 'failed' THEN jsonb_build_object('started_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                               'error', last_error)
         ELSE jsonb_build_object('command_id', 'bench', 'from', 'pending') END,
       completed_at
FROM runnerq_activities WHERE status IN ('failed', 'dead_letter', 'cancelled')
"""

POOLS_SQL = """
INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, activity_types, started_at, last_seen_at)
SELECT md5('pool' || g)::uuid, (ARRAY['default','emails','reports'])[1 + g % 3], 8, NULL,
       now() - interval '2 hours', now() - ((g % 5) || ' seconds')::interval
FROM generate_series(1, 6) AS g
"""


# A day of the live console's rollups, as the workers' maintenance loop would have left them:
# every minute, queue and type (24 rows a minute, 34,560 in all, and their ten-minute sums), and a depth sample per minute
# and queue.
ROLLUPS_SQL = """
INSERT INTO runnerq_console_minutes (minute, queue_name, activity_type, completed, failed, dead_lettered,
    latency_count, latency_sum_ms, latency_max_ms, latency_b4, latency_b5, latency_b8)
SELECT date_trunc('minute', now()) - m * interval '1 minute', q, t, 40 + m % 17, m % 3, (m % 11 = 0)::int,
       40 + m % 17, (40 + m % 17) * 180.0, 2400, 20, 15 + m % 17, 5
  FROM generate_series(0, 1439) m,
       unnest(ARRAY['default','emails','reports']) q,
       unnest(ARRAY['SendEmail','ChargeCard','RenderReport','SyncInventory','ResizeImage','Webhook','Backfill','Notify']) t
"""
# The ten-minute sums the rollup keeps beside the minutes (what the day's charts read).
TENS_SQL = """
INSERT INTO runnerq_console_minutes (span_minutes, minute, queue_name, activity_type, completed, failed,
    dead_lettered, latency_count, latency_sum_ms, latency_max_ms, latency_b4, latency_b5, latency_b8)
SELECT 10, date_bin(interval '10 minutes', minute, timestamptz '2000-01-01'), queue_name, activity_type,
       sum(completed), sum(failed), sum(dead_lettered), sum(latency_count), sum(latency_sum_ms),
       max(latency_max_ms), sum(latency_b4), sum(latency_b5), sum(latency_b8)
  FROM runnerq_console_minutes WHERE span_minutes = 1 GROUP BY 2, 3, 4
"""
DEPTH_SQL = """
INSERT INTO runnerq_console_depth (minute, queue_name, due, scheduled, processing, sampled_at)
SELECT date_trunc('minute', now()) - m * interval '1 minute', q, 100 + m % 50, 20, 8, now()
  FROM generate_series(0, 1439) m, unnest(ARRAY['default','emails','reports']) q
"""


# The rollups of many activity types (--types, 5,000 by default) spread over the 3 queues: a day
# of ten-minute rows (144 a type: 720,000 for 5,000 types) and two hours of minute rows (the last
# hour's chart reads an hour of them), as the maintenance loop would have left them.
MANY_TYPES_SQL = """
INSERT INTO runnerq_console_minutes (span_minutes, minute, queue_name, activity_type, completed, failed,
    dead_lettered, latency_count, latency_sum_ms, latency_max_ms, latency_b4, latency_b5, latency_b8)
SELECT s.span, s.first - m * make_interval(mins => s.span),
       (ARRAY['default','emails','reports'])[1 + t %% 3], 'Kind' || t, 4 + (m + t) %% 7, (m + t) %% 3 / 2,
       ((m + t) %% 97 = 0)::int, 4 + (m + t) %% 7, (4 + (m + t) %% 7) * 180.0, 2400 + t %% 500, 2,
       1 + (m + t) %% 7, 1
  FROM (VALUES (10, date_bin(interval '10 minutes', now(), timestamptz '2000-01-01'), 143),
               (1, date_trunc('minute', now()), 119)) AS s(span, first, last),
       LATERAL generate_series(0, s.last) m, generate_series(1, %(types)s) t
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="activities to create (default 1,000,000)"
    )
    parser.add_argument("--repeat", type=int, default=7, help="requests per view (default 7)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--database", help="reuse this (kept) database instead of creating and filling one")
    parser.add_argument(
        "--queues",
        type=int,
        default=1000,
        help="queues of the last round, where the activities are spread over that many (default 1,000)",
    )
    parser.add_argument(
        "--types",
        type=int,
        default=5000,
        help="activity types of the live console's round, whose rollups hold that many (default 5,000; 0 skips it)",
    )
    parser.add_argument(
        "--no-backlog",
        action="store_true",
        help="skip the second round, where half of the completed activities become a pending backlog",
    )
    args = parser.parse_args()

    import psycopg

    from tests.helpers import with_dbname

    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name = args.database or f"rq_bench_admin_{uuid.uuid4().hex[:8]}"
    url = with_dbname(server, name)
    created = False
    if not args.database:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        created = True
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        if created:
            fill(url, args.rows)
        print("== round 1: a healthy queue (mostly completed work)\n")
        failures = measure(url, args.repeat)
        if args.types:
            failures += measure_many_types(url, args.types, args.repeat)
        if created and not args.no_backlog:
            make_backlog(url)
            print("\n== round 2: a big backlog (half of the completed activities made pending again)\n")
            failures += measure(url, args.repeat)
        if created:
            spread_queues(url, args.queues)
            print(f"\n== round 3: the same activities spread over {args.queues:,} queues, one pool each\n")
            failures += measure(url, args.repeat)
        return 1 if failures else 0
    finally:
        from django.db import connections

        connections.close_all()
        if created and not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        elif created:
            print(f"\nkept database {name} (reuse with --database {name})")


def fill(url: str, rows: int) -> None:
    import psycopg

    print(f"filling {rows:,} activities ...", flush=True)
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        for label, sql in (
            ("activities", FILL_SQL),
            ("inputs", INPUTS_SQL),
            ("idempotency keys", KEYS_SQL),
            ("results", RESULTS_SQL),
            ("retry events", EVENTS_SQL),
            ("terminal events", TERMINAL_EVENTS_SQL),
            ("worker pools", POOLS_SQL),
            ("console rollups", ROLLUPS_SQL),
            ("ten-minute sums", TENS_SQL),
            ("depth samples", DEPTH_SQL),
        ):
            step = time.monotonic()
            # Only FILL_SQL has a parameter; "%" is the modulo operator everywhere else.
            cur = conn.execute(sql.replace("%", "%%").replace("%%(rows)s", "%(rows)s"), {"rows": rows})
            print(f"  {label:<16} {cur.rowcount:>10,} rows  {time.monotonic() - step:6.1f} s", flush=True)
        queue_totals(conn)
        conn.execute("VACUUM ANALYZE")
    print(f"filled and analyzed in {time.monotonic() - started:.0f} s\n", flush=True)


def queue_totals(conn: Any) -> None:
    """Each queue's totals over its types (which the charts' series read) and the hourly sums
    per type (the day's types table), written by the rollup's own statements over every rollup."""
    from runnerq_django.storage.sql import console as sql_console

    since = datetime.now(UTC) - timedelta(days=3)
    for queue in ("default", "emails", "reports"):
        for statement in (sql_console.ROLLUP_TOTALS, sql_console.ROLLUP_HOURS):
            conn.execute(statement, {"queue": queue, "derived_since": since})


def measure_many_types(url: str, types: int, repeat: int) -> int:
    """The live console over ``types`` activity types: the day's chart once summed 720,000
    ten-minute rows every refresh (3.9-4.7 s for 5,000 types, or a 503 at the statement timeout)
    and the hour's 300,000 minute rows (2.1-3.1 s). The rows are deleted afterwards."""
    import psycopg
    from django.contrib.auth import get_user_model
    from django.test import Client

    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(MANY_TYPES_SQL, {"types": types})
        queue_totals(conn)
        conn.execute("VACUUM ANALYZE runnerq_console_minutes")
    print(
        f"\n== the live console over {types:,} activity types: {cur.rowcount:,} rollup rows"
        f" (a day of ten-minute rows, two hours of minute rows) in {time.monotonic() - started:.0f} s\n"
    )
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    base = "/admin/runnerq_django/activity/overview/live.json"
    failures = 0
    for label, path in (
        ("live console, last hour", base),
        ("live console, last day", f"{base}?window=24h"),
        ("live console, last day, one queue", f"{base}?window=24h&queue=emails"),
    ):
        times, size = [], 0
        for _ in range(repeat + 1):
            begun = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - begun) * 1000)
            size = len(response.content)
            if response.status_code != 200:
                print(f"{label:<40} HTTP {response.status_code}")
                failures += 1
                break
        else:
            data = response.json()
            times = times[1:]
            print(
                f"{label:<40} {statistics.median(times):7.1f}ms {max(times):7.1f}ms"
                f"  {len(data['types'])} types + other ({data['hidden_types']:,}), {size / 1024:.0f} KiB"
            )
    failures += measure_rollup(repeat)  # its rows of the current minutes, hour and totals
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM runnerq_console_minutes WHERE activity_type LIKE 'Kind%%'")
        queue_totals(conn)
    return failures


def make_backlog(url: str) -> None:
    import psycopg

    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(
            "UPDATE runnerq_activities SET status = 'pending', completed_at = NULL"
            " WHERE status = 'completed' AND hashtext(id::text) % 2 = 0"
        )
        conn.execute("VACUUM ANALYZE runnerq_activities")
    print(f"\n{cur.rowcount:,} completed activities made pending in {time.monotonic() - started:.0f} s")


def spread_queues(url: str, queues: int) -> None:
    """Many queues (the overview once took 7.9 s and the list 4.3 s with 1,000): every activity
    moves to one of ``queues`` queues, and each queue gets a live pool."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE runnerq_activities SET queue_name = 'q' || (abs(hashtext(id::text)) %% %s)", [queues]
        )
        conn.execute(
            "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, started_at, last_seen_at)"
            " SELECT md5('qpool' || g)::uuid, 'q' || g, 4, now() - interval '1 hour', now()"
            " FROM generate_series(0, %s - 1) g",
            [queues],
        )
        conn.execute("VACUUM ANALYZE runnerq_activities")
        conn.execute("VACUUM ANALYZE runnerq_worker_pools")
    print(f"\nactivities spread over {queues:,} queues in {time.monotonic() - started:.0f} s")


def measure(url: str, repeat: int) -> int:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, utils
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    if not getattr(utils, "_rq_bench_env", False):
        setup_test_environment()  # instruments rendering so a response carries its context
        utils._rq_bench_env = True
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runnerq_activities")
        total = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM runnerq_events")
        events = cur.fetchone()[0]
        cur.execute("SELECT status, count(*) FROM runnerq_activities GROUP BY 1 ORDER BY 2 DESC")
        mix = ", ".join(f"{s} {n:,}" for s, n in cur.fetchall())
        cur.execute("SELECT version()")
        version = cur.fetchone()[0].split(",")[0]
        # A dead letter with history, and a root with a child, for the detail pages.
        cur.execute(
            "SELECT id FROM runnerq_activities WHERE status = 'dead_letter' ORDER BY created_at DESC, id DESC LIMIT 1"
        )
        dead = cur.fetchone()[0]
        cur.execute(
            "SELECT parent_activity_id FROM runnerq_activities WHERE parent_activity_id IS NOT NULL"
            " ORDER BY created_at DESC, id DESC LIMIT 1"
        )
        root = cur.fetchone()[0]

    base = "/admin/runnerq_django/"
    views = [
        ("overview", f"{base}activity/overview/"),
        ("changelist, unfiltered", f"{base}activity/"),
        ("changelist, status=dead_letter", f"{base}activity/?status=dead_letter"),
        ("changelist, status=completed, page 50", f"{base}activity/?status=completed&p=50"),
        ("changelist, queue+status+type", f"{base}activity/?queue=emails&status=failed&type=ChargeCard"),
        ("changelist, search by id", f"{base}activity/?q={dead}"),
        ("changelist, search by app key", f"{base}activity/?q=order-500000"),
        ("detail, dead letter", f"{base}activity/{dead}/change/"),
        ("detail, root with child", f"{base}activity/{root}/change/"),
        ("events, unfiltered", f"{base}event/"),
        ("events, type=DeadLetter, last hour", f"{base}event/?event_type=DeadLetter&since=1h"),
        ("scheduler", f"{base}activity/scheduler/"),
        ("live console, last hour", f"{base}activity/overview/live.json"),
        ("live console, last day", f"{base}activity/overview/live.json?window=24h"),
        ("live console, last day, one queue", f"{base}activity/overview/live.json?window=24h&queue=emails"),
    ]
    print(f"PostgreSQL: {version}")
    print(f"activities: {total:,} ({mix}); events: {events:,}")
    print(f"each view requested {repeat} times after one warm-up request (Django test client, DEBUG off)\n")
    print(f"{'view':<40} {'median':>9} {'worst':>9} {'queries':>8} {'rows':>6}")
    failures = 0
    for label, path in views:
        response = client.get(path)
        if response.status_code != 200:
            print(f"{label:<40} HTTP {response.status_code}")
            failures += 1
            continue
        times = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        context = response.context
        rows = len(context["cl"].result_list) if context is not None and "cl" in context else ""
        print(
            f"{label:<40} {statistics.median(times):7.1f}ms {max(times):7.1f}ms {len(queries):>8} {rows:>6}"
        )
    failures += measure_rollup(repeat)
    return failures


def measure_rollup(repeat: int) -> int:
    """The worker's side of the live console: one maintenance rollup of the busiest queue
    (recompute its last minutes, sample its depth), in its transaction. Not an admin request,
    but what keeps the admin's refresh cheap has to be cheap itself. Rolled back afterwards so
    the charts' day of rollups stays as filled."""
    from django.db import transaction

    from runnerq_django.storage import console

    times = []
    for _ in range(repeat + 1):
        with transaction.atomic():
            started = time.perf_counter()
            console.roll_up("default")
            times.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    times = times[1:]
    print(
        f"{'rollup (maintenance), queue default':<40} {statistics.median(times):7.1f}ms {max(times):7.1f}ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
