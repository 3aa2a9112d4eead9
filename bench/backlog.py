"""Benchmark: a backlog of ten million (issue 32), beside the same measures on 10,000.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/backlog.py \
        [--count 10000000] [--small 10000] [--bulk 20000] [--rounds 3] [--concurrency 32] [--no-retention]

In a scratch database (dropped afterwards):

1. **Bulk enqueue ratio**: ``enqueue_many`` (chunks of 1,000, one transaction) without keys and
   with keys, against ``COPY`` into the spec's two tables (``bench/floor.py``'s
   ``enqueue_copy_spec_tables``: ``runnerq_activities`` and ``runnerq_inputs`` with every index
   they keep), ``--bulk`` rows each, ``--rounds`` rounds in turn, pooled; and the WAL each writes
   per activity (``pg_current_wal_lsn()`` before and after: the server's, so other databases'
   writes count too on a shared server).
2. For ``--small`` and then ``--count`` pending activities over 20 types and 5 queues, loaded
   through ``enqueue_many`` (the load rate is printed), ``VACUUM ANALYZE``, then:

   - **claim at the head**: rolled-back claims of 16, of one type and of the 20 types
     (``storage.attempts.claim``, as the worker calls it), median of 20;
   - **the admin**: changelist (unfiltered, and one queue), the queues overview, ``live.json``
     (Django's test client, in-process: the server's time), median and worst of 5;
   - ``runnerq_status`` (in-process ``call_command``), median of 3;
   - **burn-down** of the first queue by a real ``runworker --concurrency --concurrency`` claiming
     the 20 types, for 30 s or until it is empty: activities / (last completion - first start);
     and **enqueue-to-start at the head** while it runs: 20 activities of priority 4 (ahead of
     the backlog), 0.1 s apart, ``started_at - created_at`` on the database clock.

3. **Retention** (``--count`` only): the other four queues' activities are made completed eight
   days ago (an ``UPDATE``: they have no results or events; the burnt-down ones have both), then
   ``storage.cleanup`` (batches of 500 trees, the worker's default) deletes them while a worker
   burns down a fresh backlog of the first queue and this process times a rolled-back claim
   there every 0.2 s: trees deleted per second, and the claims' median and worst during it.

The targets of issue 32: claim time and enqueue-to-start within twice the 10,000-row figures;
every admin page under 300 ms; retention never blocks a claim for more than 100 ms and keeps up
with 2,000 completions a second; ``enqueue_many`` at 0.9 of ``COPY``. Not a test: nothing is
asserted. The workers, this process and Postgres share the machine's CPUs.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import throughput  # noqa: E402
from bench.procs import stop_group  # noqa: E402
from runnerq_django import activity  # noqa: E402

QUEUES = [f"bench_backlog_{i}" for i in range(5)]
TYPE_NAMES = [f"bench.backlog.t{i:02d}" for i in range(20)]
BULK_QUEUE = "bench_bulk"


def _noop(payload):
    return None


TYPES = [activity(name=name)(_noop) for name in TYPE_NAMES]


def load(count: int) -> float:
    """``count`` pending activities, round robin over the queues and types, 1,000 per
    ``enqueue_many``, 100,000 per transaction: activities per second."""
    from django.db import transaction

    began = time.perf_counter()
    done, call = 0, 0
    while done < count:
        with transaction.atomic():
            for _ in range(100):
                if done >= count:
                    break
                n = min(1000, count - done)
                definition = TYPES[call % len(TYPES)]
                definition.enqueue_many([{"i": done + i} for i in range(n)], queue=QUEUES[(call // 20) % 5])
                done += n
                call += 1
    return count / (time.perf_counter() - began)


def sql(statement: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def wal_lsn() -> int:
    return int(sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])


def bulk_ratio(url: str, n: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Activities per second and WAL bytes per activity of each side, pooled over the rounds."""
    from django.db import connection, transaction

    from bench import floor

    totals = {"copy": [0.0, 0], "enqueue_many": [0.0, 0], "enqueue_many, keyed": [0.0, 0]}
    conn = floor.connect(url)

    def ours(keyed: bool) -> None:
        payloads = [{"i": i} for i in range(n)]
        with transaction.atomic():
            for start in range(0, n, 1000):
                chunk = payloads[start : start + 1000]
                keys = [f"k-{time.monotonic_ns()}-{start + i}" for i in range(len(chunk))] if keyed else None
                TYPES[0].enqueue_many(chunk, queue=BULK_QUEUE, idempotency_keys=keys)

    sides = {
        "copy": lambda: floor.enqueue_copy_spec_tables(conn, n),
        "enqueue_many": lambda: ours(False),
        "enqueue_many, keyed": lambda: ours(True),
    }
    connection.ensure_connection()
    for _ in range(rounds):
        for name, run in sides.items():
            before = wal_lsn()
            began = time.perf_counter()
            run()
            totals[name][0] += time.perf_counter() - began
            totals[name][1] += wal_lsn() - before
    conn.close()
    floor.delete_spec_copies(url)
    sql("DELETE FROM runnerq_idempotency WHERE queue_name = %s", [BULK_QUEUE])
    sql("DELETE FROM runnerq_inputs WHERE queue_name = %s", [BULK_QUEUE])
    sql("DELETE FROM runnerq_activities WHERE queue_name = %s", [BULK_QUEUE])
    return {name: (n * rounds / seconds, wal / (n * rounds)) for name, (seconds, wal) in totals.items()}


def timed_claim(queue: str, types: list[str]) -> float:
    from django.db import transaction

    from runnerq_django.storage import attempts

    with transaction.atomic():
        began = time.perf_counter()
        attempts.claim(queue, types=types, limit=16, lease_ms=60_000)
        ms = (time.perf_counter() - began) * 1000
        transaction.set_rollback(True)
    return ms


def admin_times(repeat: int = 5) -> dict[str, tuple[float, float]]:
    from django.contrib.auth import get_user_model
    from django.test import Client, utils

    if not getattr(utils, "_rq_bench_env", False):
        utils.setup_test_environment()  # ALLOWED_HOSTS takes the test client's host
        utils._rq_bench_env = True
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    base = "/admin/runnerq_django/activity/"
    pages = {
        "changelist": base,
        "changelist, one queue": f"{base}?queue={QUEUES[1]}",
        "overview": f"{base}overview/",
        "live.json": f"{base}overview/live.json",
    }
    out = {}
    for name, path in pages.items():
        if client.get(path).status_code != 200:
            raise SystemExit(f"{path}: not 200")
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - began) * 1000)
        out[name] = (statistics.median(times), max(times))
    return out


def status_ms(repeat: int = 3) -> float:
    from django.core.management import call_command

    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call_command("runnerq_status", stdout=io.StringIO())
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def start_worker(env: dict, queue: str, concurrency: int):
    return throughput._start_workers(env, queue, 1, concurrency, handlers="bench.backlog", types=TYPE_NAMES)


def burn(env: dict, concurrency: int, seconds: float = 30) -> tuple[float, list[float], int]:
    """The first queue's burn-down rate, the head's enqueue-to-start (ms) and the rows done."""
    proc = start_worker(env, QUEUES[0], concurrency)
    try:
        throughput._wait_for_pools(QUEUES[0], 1)
        t0 = sql("SELECT now()")[0][0]
        ids = []
        for i in range(20):
            ids.append(TYPES[i].enqueue({"head": i}, queue=QUEUES[0], priority=4).id)
            time.sleep(0.1)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            left = sql(
                "SELECT count(*) FROM (SELECT 1 FROM runnerq_activities WHERE queue_name = %s "
                "AND status = 'pending' LIMIT 1) x",
                [QUEUES[0]],
            )[0][0]
            if not left:
                break
            time.sleep(1)
    finally:
        stop_group(proc)
    done, span = sql(
        "SELECT count(*), extract(epoch FROM max(completed_at) - min(started_at)) FROM runnerq_activities "
        "WHERE queue_name = %s AND status = 'completed' AND started_at >= %s",
        [QUEUES[0], t0],
    )[0]
    waits = sql(
        "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM runnerq_activities WHERE id = ANY(%s) "
        "AND started_at IS NOT NULL",
        [ids],
    )
    return done / float(span or 1), [float(w) for (w,) in waits], done


def measure(label: str, count: int, env: dict, concurrency: int) -> dict:
    rate = load(count)
    sql("VACUUM ANALYZE")
    claims_one = [timed_claim(QUEUES[0], [TYPE_NAMES[0]]) for _ in range(20)]
    claims_all = [timed_claim(QUEUES[0], TYPE_NAMES) for _ in range(20)]
    admin = admin_times()
    status = status_ms()
    burn_rate, waits, done = burn(env, concurrency)
    figures = {
        "label": label,
        "count": count,
        "load_rate": rate,
        "claim_one_ms": statistics.median(claims_one),
        "claim_all_ms": statistics.median(claims_all),
        "admin": admin,
        "status_ms": status,
        "burn_rate": burn_rate,
        "burnt": done,
        "head_p50_ms": statistics.median(waits) if waits else float("nan"),
        "head_max_ms": max(waits) if waits else float("nan"),
    }
    print(
        f"  {label}: loaded {count:,} at {rate:,.0f}/s; claim of one type {figures['claim_one_ms']:.2f} ms, "
        f"of 20 {figures['claim_all_ms']:.2f} ms; burn-down {burn_rate:,.0f}/s; head p50 "
        f"{figures['head_p50_ms']:.1f} ms; status {status:.0f} ms; "
        + "; ".join(f"{k} {m:.0f}/{w:.0f} ms" for k, (m, w) in admin.items()),
        flush=True,
    )
    return figures


def retention(env: dict, concurrency: int, fresh: int) -> dict:
    """Finish the other queues' activities eight days ago, then delete them while a worker burns
    ``fresh`` new activities of the first queue and a claim there is timed every 0.2 s."""
    from django.db import connection

    from runnerq_django.storage import retention as storage_retention

    began = time.perf_counter()
    for queue in QUEUES[1:]:
        sql(
            "UPDATE runnerq_activities SET status = 'completed', started_at = now() - interval '8 days', "
            "completed_at = now() - interval '8 days' WHERE queue_name = %s AND status = 'pending'",
            [queue],
        )
    sql("VACUUM ANALYZE runnerq_activities")
    prepared = time.perf_counter() - began
    (finished,) = sql(
        "SELECT count(*) FROM runnerq_activities WHERE status = 'completed' AND completed_at < now() - interval '7 days'"
    )[0]
    for i in range(0, fresh, 1000):
        TYPES[i // 1000 % 20].enqueue_many([{}] * min(1000, fresh - i), queue=QUEUES[0])
    claims: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            while not stop.wait(0.2):
                claims.append(timed_claim(QUEUES[0], TYPE_NAMES))
        finally:
            connection.close()

    proc = start_worker(env, QUEUES[0], concurrency)
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        throughput._wait_for_pools(QUEUES[0], 1)
        t0 = sql("SELECT now()")[0][0]
        sampler.start()
        began = time.perf_counter()
        deleted = 0
        for queue in QUEUES[1:]:
            while n := storage_retention.cleanup(queue, completed_s=7 * 86400, batch=500):
                deleted += n
        seconds = time.perf_counter() - began
    finally:
        stop.set()
        sampler.join(30)
        stop_group(proc)
    (completed_during,) = sql(
        "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'completed' "
        "AND completed_at >= %s AND completed_at <= %s::timestamptz + make_interval(secs => %s)",
        [QUEUES[0], t0, t0, seconds],
    )[0]
    return {
        "finished": finished,
        "prepared_s": prepared,
        "deleted": deleted,
        "seconds": seconds,
        "claims": claims,
        "completed_per_s": completed_during / seconds,
    }


def _ratio(large: float, small: float) -> str:
    return f"{large / small:.2f}" if small else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--bulk", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--fresh", type=int, default=50_000, help="the first queue's backlog during retention"
    )
    parser.add_argument("--no-retention", action="store_true")
    parser.add_argument("--bulk-only", action="store_true", help="only the bulk enqueue ratio")
    args = parser.parse_args()

    from bench.scratch import migrated_database

    with migrated_database("rq_bench_backlog") as url, tempfile.TemporaryDirectory() as tmp:
        env = throughput._worker_env(url, tmp)
        (version,) = sql("SELECT current_setting('server_version')")[0]
        print("runnerq-django with a large backlog (bench/backlog.py)")
        print(
            f"  machine   {os.cpu_count()} CPUs shared with other sessions' work, load average "
            f"{os.getloadavg()[0]:.1f} at the start; PostgreSQL {version}"
        )
        print(
            f"  workload  {len(TYPE_NAMES)} types x {len(QUEUES)} queues; worker --concurrency {args.concurrency}"
        )
        bulk = bulk_ratio(url, args.bulk, args.rounds)
        copy_rate = bulk["copy"][0]
        print(
            f"\n| bulk enqueue of {args.bulk:,}, {args.rounds} rounds | activities/s | / COPY | WAL bytes per activity |"
        )
        print("|---|---|---|---|")
        for name, (rate, wal) in bulk.items():
            print(f"| {name} | {rate:,.0f} | {rate / copy_rate:.2f} | {wal:,.0f} |")
        print(flush=True)
        if args.bulk_only:
            return
        small = measure("small", args.small, env, args.concurrency)
        for table in (
            "runnerq_events",
            "runnerq_results",
            "runnerq_inputs",
            "runnerq_idempotency",
            "runnerq_activities",
        ):
            sql(f"DELETE FROM {table}")
        sql("VACUUM ANALYZE")
        large = measure("large", args.count, env, args.concurrency)
        print(f"\n| backlog | {args.small:,} | {args.count:,} | ratio |")
        print("|---|---|---|---|")
        rows = [
            ("enqueue_many load, activities/s", "load_rate", "{:,.0f}"),
            ("claim of 16, one type, ms (median)", "claim_one_ms", "{:.2f}"),
            ("claim of 16, 20 types, ms (median)", "claim_all_ms", "{:.2f}"),
            ("enqueue-to-start at the head, p50 ms", "head_p50_ms", "{:.1f}"),
            ("enqueue-to-start at the head, max ms", "head_max_ms", "{:.1f}"),
            ("burn-down of the first queue, activities/s", "burn_rate", "{:,.0f}"),
            ("runnerq_status, ms (median)", "status_ms", "{:.0f}"),
        ]
        for title, key, fmt in rows:
            print(
                f"| {title} | {fmt.format(small[key])} | {fmt.format(large[key])} | {_ratio(large[key], small[key])} |"
            )
        for page in small["admin"]:
            (m1, w1), (m2, w2) = small["admin"][page], large["admin"][page]
            print(
                f"| admin {page}, ms (median / worst) | {m1:.0f} / {w1:.0f} | {m2:.0f} / {w2:.0f} | {_ratio(m2, m1)} |"
            )
        if not args.no_retention:
            kept = retention(env, args.concurrency, args.fresh)
            claims = kept["claims"] or [float("nan")]
            print(
                f"\nretention: {kept['deleted']:,} trees of {kept['finished']:,} finished (made finished in "
                f"{kept['prepared_s']:.0f} s) deleted in {kept['seconds']:.1f} s: "
                f"{kept['deleted'] / kept['seconds']:,.0f}/s, while a worker completed {kept['completed_per_s']:,.0f}/s; "
                f"claims of 16 meanwhile ({len(kept['claims'])}): median {statistics.median(claims):.1f} ms, "
                f"worst {max(claims):.1f} ms"
            )


if __name__ == "__main__":
    main()
