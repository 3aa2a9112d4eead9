"""Benchmark: time per claim on a burst-loaded queue, before and after ANALYZE.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/claims.py [--claims 20]

A queue filled in a burst is exactly when claims must be fast, and exactly when Postgres has no
statistics on the new rows yet (autovacuum analyzes later, or never on a busy server). Creates
a scratch database (dropped afterwards), migrates it, switches autovacuum off on the RunnerQ
tables (so no ANALYZE happens behind the benchmark's back; ``pg_stat_user_tables`` is checked),
and measures with ``storage.claim`` itself, one connection, each claim committed and its rows
put back to ``pending`` afterwards (every claim of a shape sees the same queue; the claim
statements stay prepared, as a worker's do):

1. **Burst**: 10,000 activities of types ``t``/``u`` and 10,000 of type ``go`` (another SDK's),
   priorities 1-4, submitted with ``submit_many`` and never analyzed. ``--claims`` claims of 50
   of each shape (untyped, one type, two types, ten types), median time per claim; then the
   same after ``ANALYZE`` on the same queue. The two must be within 2x of each other.
2. **Many types**: claims of 50 naming 20 types on a 100,000-activity backlog where the 20
   types are 1% of it (behind one other type in claim order) and where they are all of it,
   against a claim of one of them; never analyzed, then analyzed.

Not a test: no figure is asserted, only that the setup is what it says (no statistics in 1,
full batches).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BURST = 10_000
LIMIT = 50
SHAPES = {
    "untyped": None,
    "one type": ["t"],
    "two types": ["t", "u"],
    "ten types": ["t", "u"] + [f"absent{i}" for i in range(8)],
}
TABLES = ("runnerq_activities", "runnerq_inputs")


def time_claims(queue: str, types, claims: int, limit: int | None = None) -> float:
    """Median milliseconds per claim of ``limit`` (``LIMIT``) over ``claims`` claims, each
    committed, its rows then put back to ``pending`` (so every claim sees the same queue, before
    and after ANALYZE). Not rolled back: after a ROLLBACK psycopg deallocates the connection's
    prepared statements, and every claim would be planned anew, which a worker's claims are not."""
    from django.db import connection

    from runnerq_django import storage

    limit = limit or LIMIT
    times = []
    for _ in range(claims):
        start = time.perf_counter()
        batch = storage.claim(queue, types=types, limit=limit, lease_ms=600_000, worker_id="bench")
        times.append((time.perf_counter() - start) * 1000)
        assert len(batch) == limit, f"claimed {len(batch)} of {limit}"
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE runnerq_activities SET status = 'pending', current_worker_id = NULL, "
                "lease_deadline_ms = NULL, started_at = NULL WHERE id = ANY(%s)",
                [[c.id for c in batch]],
            )
    return statistics.median(times)


def analyze_counts(cursor) -> int:
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute(
        "SELECT COALESCE(sum(analyze_count + autoanalyze_count), 0) FROM pg_stat_user_tables "
        "WHERE relname = ANY(%s)",
        [list(TABLES)],
    )
    return cursor.fetchone()[0]


def burst(cursor, claims: int) -> None:
    from runnerq_django import storage
    from runnerq_django.storage.types import NewActivity

    queue = "bench_burst"
    for start in range(0, BURST, 1000):
        storage.submit_many(
            queue,
            [NewActivity("t" if i % 2 else "u", priority=1 + i % 4) for i in range(start, start + 1000)],
        )
        storage.submit_many(
            queue, [NewActivity("go", priority=1 + i % 4) for i in range(start, start + 1000)]
        )
    assert analyze_counts(cursor) == 0, "the tables were analyzed: the burst case is gone"
    before = {shape: time_claims(queue, types, claims) for shape, types in SHAPES.items()}
    assert analyze_counts(cursor) == 0, "the tables were analyzed during the measurement"
    analyze(cursor)
    after = {shape: time_claims(queue, types, claims) for shape, types in SHAPES.items()}
    print(
        f"  1. burst of {2 * BURST:,} (t/u {BURST:,}, go {BURST:,}), claims of {LIMIT}, "
        f"median ms per claim of {claims}"
    )
    print(f"     {'shape':<10} {'no ANALYZE':>11} {'ANALYZE':>9} {'ratio':>6}")
    for shape in SHAPES:
        ratio = max(before[shape], after[shape]) / min(before[shape], after[shape])
        print(f"     {shape:<10} {before[shape]:>11.2f} {after[shape]:>9.2f} {ratio:>6.2f}")


def many_types(cursor, claims: int, backlog: int = 100_000, types: int = 20) -> None:
    """Claims of ``types`` types on a ``backlog`` where they are 1% of it, behind the other 99%
    (one other type, higher priority) in claim order, and where they are all of it; written in
    one statement each, timed never analyzed, then analyzed."""
    wanted = [f"py{i}" for i in range(types)]
    layouts = {"bench_minority": (1, "1%, behind the rest"), "bench_majority": (100, "all of it")}
    for queue, (share, _) in layouts.items():
        cursor.execute(
            """
            INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, created_at,
                                            root_activity_id)
            SELECT gen_random_uuid(), %(queue)s,
                   CASE WHEN mod(g, 100) < %(share)s THEN 'py' || mod(abs(hashint4(g)), %(types)s) ELSE 'go' END,
                   CASE WHEN mod(g, 100) < %(share)s THEN 1 ELSE 2 END, 'pending',
                   now() - make_interval(secs => (%(backlog)s - g) / 1000.0), NULL
            FROM generate_series(1, %(backlog)s) g""",
            {"queue": queue, "share": share, "types": types, "backlog": backlog},
        )
        cursor.execute(
            "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) "
            "SELECT id, queue_name, 'null' FROM runnerq_activities WHERE queue_name = %s",
            [queue],
        )
    assert analyze_counts(cursor) == 0, "the tables were analyzed"

    def measure():
        return {
            queue: (
                time_claims(queue, wanted, claims),
                time_claims(queue, wanted[:1], claims, ONE_TYPE_LIMIT),
            )
            for queue in layouts
        }

    # A type of the minority holds about 50 rows: its own claim takes at most 40.
    ONE_TYPE_LIMIT = min(LIMIT, 40)
    timed = {"never analyzed": measure()}
    analyze(cursor)
    timed["analyzed"] = measure()
    print(
        f"  2. claims of {LIMIT} naming {types} types, or of {ONE_TYPE_LIMIT} of one of them, {backlog:,}-activity backlog, "
        f"median ms per claim of {claims}"
    )
    print(f"     {'the 20 types are':<22} {'':<15} {'20 types':>9} {'one type':>9} {'ratio':>6}")
    for phase, by_queue in timed.items():
        for queue, (several, one) in by_queue.items():
            print(
                f"     {layouts[queue][1]:<22} {phase:<15} {several:>9.2f} {one:>9.2f} {several / one:>6.2f}"
            )


def analyze(cursor) -> None:
    for table in TABLES:
        cursor.execute(f"ANALYZE {table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=20, help="claims per shape and phase")
    parser.add_argument("--no-many-types", action="store_true", help="skip the 100,000-row cases of 20 types")
    parser.add_argument(
        "--limit",
        type=int,
        default=LIMIT,
        help="activities per claim (20 types x more than 75 is past attempts.MAX_TYPE_WALK_ROWS: the filtered walk)",
    )
    args = parser.parse_args()
    globals()["LIMIT"] = args.limit

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ.setdefault("RUNNERQ_LOG_LEVEL", "WARNING")
    import django

    from testproject.database import database_url

    django.setup()
    from bench.storage import fresh_database

    print("runnerq-django claim benchmark: time per claim, burst-loaded and analyzed")
    print(
        f"  machine      {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    sections = [burst] + ([] if args.no_many_types else [many_types])
    for section in sections:
        with fresh_database(database_url(), prefix="rq_bench_claims") as cursor:
            for table in TABLES:
                cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            if section is burst:
                cursor.execute("SELECT current_setting('server_version')")
                print(
                    f"  postgres     {cursor.fetchone()[0]}; each section in a fresh database, autovacuum off "
                    f"on {', '.join(TABLES)}; one connection"
                )
            section(cursor, args.claims)


if __name__ == "__main__":
    main()
