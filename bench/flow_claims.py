"""Benchmark: what flow control costs a claim.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/flow_claims.py [--claims 20]

In a scratch database (dropped afterwards), a backlog of 20,000 activities of one type spread
over 100 partition keys, analyzed. Each claim of 64 runs in a transaction rolled back afterwards
(every claim sees the same queue), timed with the storage function itself, one connection:

- the usual claim of the type (``storage.claim``), with no pause, and with another type paused
  (the pause tests the claim reads);
- the claim of the type under a concurrency limit of 64 over 100 partitions
  (``storage.limits.claim_limited``), and under a rate limit of 64 a second
  (``storage.limits.claim_rated``);

with the statements per claim (Django's query log: one round trip each).

Not a test: nothing is asserted but the setup (full batches).
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

BACKLOG = 20_000
PARTITIONS = 100
LIMIT = 64
QUEUE = "bench_flow"
TYPE = "bench.limited"


def timed(claim, claims: int) -> tuple[float, int]:
    """Median milliseconds per claim, and statements per claim."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    times, statements = [], 0
    for _ in range(claims):
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            batch = claim()
            times.append((time.perf_counter() - start) * 1000)
            assert len(batch) == LIMIT, f"claimed {len(batch)} of {LIMIT}"
            statements = len(queries.captured_queries)  # the outermost atomic logs no BEGIN
            transaction.set_rollback(True)
    return statistics.median(times), statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=20, help="claims per case")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ.setdefault("RUNNERQ_LOG_LEVEL", "WARNING")
    import django

    from testproject.database import database_url

    django.setup()
    from bench.storage import fresh_database
    from runnerq_django import storage
    from runnerq_django.storage import flow, limits
    from runnerq_django.storage.types import NewActivity

    print("runnerq-django flow-control claim benchmark: median ms per claim of 64")
    print(
        f"  machine      {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    with fresh_database(database_url(), prefix="rq_bench_flow") as cursor:
        for start in range(0, BACKLOG, 1000):
            made = storage.submit_many(
                QUEUE, [NewActivity(TYPE, payload={"k": i % PARTITIONS}) for i in range(start, start + 1000)]
            )
            limits.record_partitions(
                QUEUE, TYPE, [(m.id, str(i % PARTITIONS)) for i, m in zip(range(start, start + 1000), made)]
            )
        cursor.execute("ANALYZE")
        cases = {
            "usual claim, nothing paused": lambda: storage.claim(
                QUEUE, types=[TYPE], limit=LIMIT, lease_ms=600_000
            ),
        }
        results = {name: timed(claim, args.claims) for name, claim in cases.items()}
        flow.pause(QUEUE, "bench.other", actor="bench")
        results["usual claim, another type paused"] = timed(cases["usual claim, nothing paused"], args.claims)
        flow.resume(QUEUE, "bench.other", actor="bench")
        results["concurrency 64 over 100 partitions"] = timed(
            lambda: limits.claim_limited(QUEUE, TYPE, 64, limit=LIMIT, lease_ms=600_000), args.claims
        )
        results["rate 64/s"] = timed(
            lambda: limits.claim_rated(QUEUE, TYPE, 64, 1.0, limit=LIMIT, lease_ms=600_000), args.claims
        )
    base = results["usual claim, nothing paused"][0]
    print(f"  {'case':<38} {'ms':>7} {'ratio':>6} {'statements':>10}")
    for name, (ms, statements) in results.items():
        print(f"  {name:<38} {ms:>7.2f} {ms / base:>6.2f} {statements:>10}")


if __name__ == "__main__":
    main()
