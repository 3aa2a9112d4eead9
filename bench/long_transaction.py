"""Benchmark: a transaction left open while the queue works (issue 32).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/long_transaction.py \
        [--minutes 10] [--backlog 2000] [--processes 1] [--concurrency 16] [--vacuum-every 60] [--no-hold]

In a scratch database (dropped afterwards): real ``manage.py runworker`` processes burn down a
queue of no-ops that a producer in this process keeps refilled to ``--backlog`` pending activities
(``enqueue_many``, every 0.2 s: a steady rate equal to what the workers take), while another session
opens a ``REPEATABLE READ`` transaction, takes its snapshot with a read and sits idle in it for
``--minutes`` (``--no-hold``: no such session, the control run). Nothing dead since the snapshot
can be removed while it is open: not by vacuum, not by a page's pruning, not by an index scan's
"killed" hints.

Every ``--sample-every`` seconds it times, in this process, each rolled back:

- **ours**: a claim of 16 (``storage.attempts.claim``, as the worker calls it);
- **floor**: the bare walk of the same index in raw SQL (``SELECT id ... ORDER BY`` the claim order
  ``LIMIT 16 FOR UPDATE SKIP LOCKED``): what any claim that starts at the head of the dequeue index
  pays, whatever runs around it;
- **hinted**: the same walk starting at the due time of the last live head found (``priority = 0
  AND retry_count = 0 AND COALESCE(scheduled_at, created_at) >= head``): what a claim that stays on
  live index entries would pay.

Minute 0 runs before the transaction is opened (the starting throughput); minutes 1 to
``--minutes`` with it held; then, with ``--after-minutes``, the transaction ends, a ``VACUUM``
runs at once, and the recovery is measured for that many minutes. Per minute of the run it prints: activities completed (throughput), the claims' median times,
enqueue-to-start p50 and p99 (``started_at - created_at`` of the activities started in the minute),
the activities table's dead and live tuples (``pg_stat_user_tables``), its size and its indexes'
size. ``--vacuum-every`` runs ``VACUUM runnerq_activities`` that often (the server of record has
autovacuum off; this is what an autovacuum tuned per table would do), and reports what it took.

Not a test: nothing is asserted. The workers, this process and Postgres share the machine's CPUs.
"""

from __future__ import annotations

import argparse
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

QUEUE = "bench_long_tx"
TYPE = "bench.long_tx.noop"
# Each handler start appends a byte here: the producer's cheap count of work taken (a count
# over the table would itself walk the dead entries the run is measuring).
STARTS_ENV = "RQ_BENCH_STARTS"
_starts_fd: int | None = None


@activity(name=TYPE)
def noop(payload):
    global _starts_fd
    if _starts_fd is None:
        _starts_fd = os.open(os.environ[STARTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(_starts_fd, b".")
    return None


RUNNABLE = "('pending', 'scheduled', 'retrying', 'waiting')"
FLOOR_WALK = f"""
SELECT a.id, COALESCE(a.scheduled_at, a.created_at) FROM runnerq_activities a
 WHERE a.queue_name = %(queue)s AND a.activity_type = %(type)s AND a.status IN {RUNNABLE}
   AND (a.status = 'pending' OR a.scheduled_at <= now())
 ORDER BY a.priority DESC, a.retry_count DESC, COALESCE(a.scheduled_at, a.created_at)
 LIMIT 16 FOR UPDATE SKIP LOCKED
"""
HINTED_WALK = f"""
SELECT a.id, COALESCE(a.scheduled_at, a.created_at) FROM runnerq_activities a
 WHERE a.queue_name = %(queue)s AND a.activity_type = %(type)s AND a.status IN {RUNNABLE}
   AND (a.status = 'pending' OR a.scheduled_at <= now())
   AND a.priority = 0 AND a.retry_count = 0 AND COALESCE(a.scheduled_at, a.created_at) >= %(head)s
 ORDER BY a.priority DESC, a.retry_count DESC, COALESCE(a.scheduled_at, a.created_at)
 LIMIT 16 FOR UPDATE SKIP LOCKED
"""
TABLE_STATE = """
SELECT n_dead_tup, n_live_tup, pg_relation_size('runnerq_activities'), pg_indexes_size('runnerq_activities')
  FROM pg_stat_user_tables WHERE relname = 'runnerq_activities'
"""
PER_MINUTE = """
SELECT floor(extract(epoch FROM started_at - %(t0)s::timestamptz) / %(minute)s)::int AS minute, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
  FROM runnerq_activities
 WHERE queue_name = %(queue)s AND status = 'completed' AND started_at >= %(t0)s::timestamptz
 GROUP BY 1 ORDER BY 1
"""


def enqueue(n: int) -> None:
    from django.db import transaction

    from runnerq_django.storage.validation import MAX_BATCH

    with transaction.atomic():
        for start in range(0, n, MAX_BATCH):
            noop.enqueue_many([{}] * min(MAX_BATCH, n - start), queue=QUEUE)


class Producer(threading.Thread):
    """Keeps about ``backlog`` activities pending: enqueues what the handlers started since."""

    def __init__(self, starts: Path, backlog: int, seeded: int):
        super().__init__(daemon=True)
        self.starts, self.backlog, self.enqueued = starts, backlog, seeded
        self.stopping = threading.Event()

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stopping.wait(0.2):
                started = self.starts.stat().st_size if self.starts.exists() else 0
                missing = self.backlog - (self.enqueued - started)
                if missing > 0:
                    enqueue(missing)
                    self.enqueued += missing
        finally:
            connection.close()


def timed(statement, params) -> tuple[float, list]:
    from django.db import connection, transaction

    with transaction.atomic():
        began = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall()
        ms = (time.perf_counter() - began) * 1000
        transaction.set_rollback(True)
    return ms, rows


def timed_claim() -> float:
    from django.db import transaction

    from runnerq_django.storage import attempts

    with transaction.atomic():
        began = time.perf_counter()
        attempts.claim(QUEUE, types=[TYPE], limit=16, lease_ms=60_000)
        ms = (time.perf_counter() - began) * 1000
        transaction.set_rollback(True)
    return ms


def table_state() -> tuple[int, int, int, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(TABLE_STATE)
        return cursor.fetchone()


def vacuum() -> float:
    from django.db import connection

    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM runnerq_activities")
    return time.perf_counter() - began


def hold(url: str):
    """A session in REPEATABLE READ that has read (its snapshot is taken), then sits idle."""
    import psycopg

    conn = psycopg.connect(url, application_name="bench_long_transaction")
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute("SELECT count(*) FROM runnerq_activities").fetchone()
    return conn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--backlog", type=int, default=2000, help="pending activities kept by the producer")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument(
        "--minute-seconds", type=float, default=60.0, help="the length of a 'minute' (smoke runs)"
    )
    parser.add_argument("--vacuum-every", type=float, default=60.0, help="seconds; 0: never")
    parser.add_argument("--no-hold", action="store_true", help="the control run: no transaction held")
    parser.add_argument(
        "--after-minutes",
        type=int,
        default=0,
        help="minutes measured after the transaction ends (and a VACUUM)",
    )
    parser.add_argument("--label", default="", help="a word printed with the setup (e.g. the code's state)")
    args = parser.parse_args()

    from bench.scratch import migrated_database

    with migrated_database("rq_bench_longtx") as url, tempfile.TemporaryDirectory() as tmp:
        starts = Path(tmp) / "starts"
        env = {**throughput._worker_env(url, tmp), STARTS_ENV: str(starts)}
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version'), current_setting('autovacuum')")
            version, autovacuum = cursor.fetchone()
            cursor.execute(
                "SELECT coalesce(array_to_string(reloptions, ', '), 'none') FROM pg_class "
                "WHERE relname = 'runnerq_activities'"
            )
            (reloptions,) = cursor.fetchone()
        print("runnerq-django with a transaction held open (bench/long_transaction.py)")
        print(
            f"  machine   {os.cpu_count()} CPUs shared with other sessions' work, load average "
            f"{os.getloadavg()[0]:.1f} at the start; PostgreSQL {version}, autovacuum {autovacuum}; "
            f"runnerq_activities options: {reloptions}"
        )
        print(
            f"  workload  no-ops, backlog kept at {args.backlog:,}; workers --processes {args.processes} "
            f"--concurrency {args.concurrency}; {'no transaction held' if args.no_hold else 'a REPEATABLE READ snapshot held'} "
            f"for {args.minutes:g} min; VACUUM every {args.vacuum_every:g} s {args.label}"
        )
        enqueue(args.backlog)
        throughput._vacuum_analyze()
        proc = throughput._start_workers(
            env, QUEUE, args.processes, args.concurrency, handlers="bench.long_transaction", types=[TYPE]
        )
        producer = Producer(starts, args.backlog, args.backlog)
        holder = None
        rows_out = []
        try:
            throughput._wait_for_pools(QUEUE, args.processes)
            time.sleep(min(5.0, args.minute_seconds))  # warm up
            with connection.cursor() as cursor:
                cursor.execute("SELECT now()")
                (t0,) = cursor.fetchone()
            producer.start()
            began = time.monotonic()
            # Minute 0 runs without the held transaction: the starting throughput.
            minute, samples = 0, {"ours": [], "floor": [], "hinted": []}
            head = None
            next_vacuum = began + args.vacuum_every if args.vacuum_every else float("inf")
            vacuums: list[float] = []
            print(
                "\n| minute | completed/s | claim ms (ours) | walk ms (floor) | walk ms (hinted) | dead tuples | live tuples "
                "| table MB | indexes MB | VACUUM s |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|")
            last_started = starts.stat().st_size if starts.exists() else 0
            while minute <= args.minutes + args.after_minutes:
                if proc.poll() is not None:
                    raise SystemExit("the workers exited")
                samples["ours"].append(timed_claim())
                ms, found = timed(FLOOR_WALK, {"queue": QUEUE, "type": TYPE})
                samples["floor"].append(ms)
                if head is None and found:
                    head = found[0][1]
                if head is not None:
                    ms, found = timed(HINTED_WALK, {"queue": QUEUE, "type": TYPE, "head": head})
                    samples["hinted"].append(ms)
                    head = found[0][1] if found else head
                now = time.monotonic()
                if now >= next_vacuum:
                    vacuums.append(vacuum())
                    next_vacuum = time.monotonic() + args.vacuum_every
                if now - began >= (minute + 1) * args.minute_seconds:
                    if minute == 0 and not args.no_hold:
                        holder = hold(url)
                    started = starts.stat().st_size
                    dead, live, table, indexes = table_state()
                    row = (
                        minute,
                        (started - last_started) / args.minute_seconds,
                        *(
                            statistics.median(samples[k]) if samples[k] else float("nan")
                            for k in ("ours", "floor", "hinted")
                        ),
                        dead,
                        live,
                        table / 2**20,
                        indexes / 2**20,
                        sum(vacuums),
                    )
                    rows_out.append(row)
                    print(
                        f"| {row[0]} | {row[1]:,.0f} | {row[2]:.2f} | {row[3]:.2f} | {row[4]:.2f} | {row[5]:,} | "
                        f"{row[6]:,} | {row[7]:.1f} | {row[8]:.1f} | {row[9]:.1f} |",
                        flush=True,
                    )
                    last_started, minute, vacuums = started, minute + 1, []
                    samples = {"ours": [], "floor": [], "hinted": []}
                    if holder is not None and minute > args.minutes:  # the held minutes are over
                        holder.rollback()
                        holder.close()
                        holder = None
                        vacuums.append(vacuum())
                        next_vacuum = time.monotonic() + args.vacuum_every
                        print("| (the transaction ends; VACUUM) | | | | | | | | | |", flush=True)
                time.sleep(args.sample_every)
        finally:
            producer.stopping.set()
            producer.join(30)
            if holder is not None:
                holder.rollback()
                holder.close()
            stop_group(proc)
        with connection.cursor() as cursor:
            cursor.execute(PER_MINUTE, {"t0": t0, "queue": QUEUE, "minute": args.minute_seconds})
            per_minute = cursor.fetchall()
        print("\n| minute | completed (rows) | enqueue-to-start p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for m, n, p50, p99 in per_minute:
            if m < len(rows_out):
                print(f"| {m} | {n:,} | {p50 * 1000:,.0f} | {p99 * 1000:,.0f} |")
        if len(rows_out) >= 2:
            first, held = rows_out[0][1], rows_out[min(len(rows_out) - 1, int(args.minutes))][1]
            print(
                f"\nlast minute / minute 0 (no transaction held) throughput: {held / first:.2f} (target: at least 0.50)"
            )
            if args.after_minutes and len(rows_out) > args.minutes + 1:
                print(f"after the transaction ended, last minute / minute 0: {rows_out[-1][1] / first:.2f}")


if __name__ == "__main__":
    main()
