"""Benchmark: a scheduler tick over 10,000 runtime schedules, and the admin's schedule list.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres [REDIS_URL=redis://...] python bench/schedules.py [--rows N]

Creates a scratch database on the server of ``DATABASE_URL``, migrates it and inserts ``--rows``
schedules (``INSERT ... SELECT generate_series``: half daily crons at spread minutes in a few
zones, half hourly intervals at spread anchors), then times, in this process:

- the first tick (every row read and turned into a job, every record created);
- a steady tick where nothing is due (the cheap change check, one ``MGET`` of every record, the
  classification) -- the bound the how-to quotes -- against its **floor**: the same cheap check
  and the same ``MGET`` alone, with raw SQL and the raw client (the ratio says what the tick adds);
- a tick after one schedule changed (its row read again, its record rebuilt);
- the admin's schedule list (100 rows a page) as a logged-in superuser, with Django's test client;
- the records' size in the cache (one small record per schedule).

The cache is a django-redis alias on ``REDIS_URL`` when it is set (database 15 by default,
flushed of this run's keys afterwards), else Django's database cache. Prints one table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FILL_SQL = """
INSERT INTO runnerq_schedules (id, activity, payload, kind, cron, tz, every_seconds, anchor, enabled,
    misfire_grace_seconds, coalesce, max_catch_up, catch_up_after_repair, jitter_seconds,
    occurrence_count, description, revision, change_seq, created_by, updated_by)
SELECT 'bench.' || g, 'bench.Report', jsonb_build_object('customer', g),
    CASE WHEN g %% 2 = 0 THEN 'cron' ELSE 'interval' END,
    CASE WHEN g %% 2 = 0 THEN (g %% 60) || ' ' || (g %% 24) || ' * * *' ELSE '' END,
    CASE WHEN g %% 2 = 0 THEN (ARRAY['UTC', 'Europe/Paris', 'America/New_York', 'Asia/Tokyo'])[1 + g %% 4] ELSE 'UTC' END,
    CASE WHEN g %% 2 = 0 THEN NULL ELSE 3600 END,
    CASE WHEN g %% 2 = 0 THEN NULL ELSE timestamptz '1970-01-01' + (g %% 3600) * interval '1 second' END,
    true, 3600, true, 10, true, 0, 0, '', 1, 0, 'bench', 'bench'
FROM generate_series(1, %(rows)s) g
"""


def timed(fn, repeat: int = 1) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), max(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="schedules (default 10,000)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="steady ticks and list requests timed (default 5)"
    )
    args = parser.parse_args()

    import psycopg

    from tests.helpers import with_dbname

    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name = f"rq_bench_schedules_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = with_dbname(server, name)
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    cache = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(FILL_SQL, {"rows": args.rows})
            cursor.execute("ANALYZE runnerq_schedules")
        fill_ms = (time.perf_counter() - started) * 1000
        cache = make_cache()
        return run(args, namespace, cache, fill_ms)
    finally:
        from django.db import connections

        if cache is not None and hasattr(cache, "client"):
            client = cache.client.get_client(write=True)
            for key in client.scan_iter(match=f"*periodic:v1:{namespace}:*"):
                client.delete(key)
        connections.close_all()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_cache():
    url = os.environ.get("REDIS_URL")
    if url:
        from django_redis.cache import RedisCache

        base = url.rsplit("/", 1)[0]
        return RedisCache(
            f"{base}/{os.environ.get('BENCH_REDIS_DB', '15')}",
            {
                "OPTIONS": {
                    "CLIENT_CLASS": "django_redis.client.DefaultClient",
                    "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
                }
            },
        )
    from django.core.cache import caches

    return caches["runnerq_scheduler"]


def run(args, namespace: str, cache, fill_ms: float) -> int:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from runnerq_django.scheduler import cacheio, records, service
    from runnerq_django.scheduler import runtime_schedules as schedules
    from runnerq_django.scheduler.tick import db_now
    from runnerq_django.storage.sql.schedules import SCHEDULES_VERSION as VERSION_SQL

    core = service.build_core([], namespace=namespace, cache=cache, max_interval=5, lease_seconds=30)
    # A few seconds after the rows were written (their timing starts then): a few intervals are due
    # in any second (at second g % 3600 of the hour), crons at whole minutes; the steady ticks fall
    # inside the same second as the first, where nothing more is due.
    now = db_now("default").replace(microsecond=0) + timedelta(seconds=3)
    if now.second == 0:
        now += timedelta(seconds=1)
    if os.environ.get("BENCH_PROFILE"):
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        core.tick(now)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(35)
        profile = cProfile.Profile()
        profile.enable()
        core.tick(now + timedelta(milliseconds=50))
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0
    first_ms, _ = timed(lambda: core.tick(now))
    rows_planned = len(core.specs)
    steady = []
    for i in range(args.repeat):
        moment = now + timedelta(milliseconds=100 * (i + 1))  # the same second: nothing more due
        steady.append(timed(lambda moment=moment: core.tick(moment))[0])
    steady_ms = statistics.median(steady)

    keys = [spec.key for spec in core.specs]
    store = cacheio.records_in(cache)

    def floor() -> None:
        with connection.cursor() as cursor:
            cursor.execute(VERSION_SQL)
            cursor.fetchone()
        store.read_many(keys)

    floor_ms = statistics.median([timed(floor)[0] for _ in range(args.repeat)])
    schedules.update("bench.2", cron="45 3 * * *")
    changed_ms, _ = timed(lambda: core.tick(now + timedelta(milliseconds=900)))

    values = store.read_many(keys)
    sizes = [len(str(value)) for value in values.values()]
    record_bytes = statistics.mean(sizes) if sizes else 0

    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host is allowed
    User.objects.create_superuser("bench", "bench@example.com", "pw")
    client = Client()
    client.force_login(User.objects.get(username="bench"))
    url = reverse("admin:runnerq_django_runtimeschedule_changelist")
    response = client.get(url)
    assert response.status_code == 200, (response.status_code, response.content[:500])
    list_ms, list_worst = timed(lambda: client.get(url), args.repeat)
    search_ms, _ = timed(lambda: client.get(url, {"q": "bench.77"}), args.repeat)
    change_ms, _ = timed(
        lambda: client.get(reverse("admin:runnerq_django_runtimeschedule_change", args=["bench.2"])),
        args.repeat,
    )

    print(f"{args.rows:,} runtime schedules (filled in {fill_ms:,.0f} ms); cache: {type(cache).__name__}\n")
    print("| measure | ms |")
    print("| --- | ---: |")
    print(f"| first tick ({rows_planned:,} rows read, records created) | {first_ms:,.0f} |")
    print(f"| steady tick, nothing due (median of {args.repeat}) | {steady_ms:,.1f} |")
    print(f"| floor: change check + MGET of every record, raw | {floor_ms:,.1f} |")
    print(f"| tick after one schedule's timing changed | {changed_ms:,.1f} |")
    print(
        f"| admin list, 100 a page (median / worst of {args.repeat}) | {list_ms:,.1f} / {list_worst:,.1f} |"
    )
    print(f"| admin list, search | {search_ms:,.1f} |")
    print(f"| admin change page | {change_ms:,.1f} |")
    print(
        f"\nSteady tick / floor: {steady_ms / floor_ms:.1f}. Records: {len(sizes):,}, {record_bytes:,.0f} bytes each on average"
        f" (key {len(records.key_for(namespace, 'job:bench.10000'))} bytes)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
