"""Benchmark: worker burn-down throughput, enqueue-to-start latency, one-by-one enqueue rate.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/throughput.py \
        [--activities 20000] [--processes 2] [--concurrency 32] [--latency-samples 1000]

Creates a scratch database on the server of ``DATABASE_URL`` (dropped afterwards), migrates it, and measures with real ``manage.py runworker`` processes:

1. **One-by-one enqueue**: ``enqueue()`` in a loop, one transaction (and one NOTIFY) each, from
   one thread, with no worker running.
2. **Burn-down**: ``--activities`` no-op activities enqueued up front (``enqueue_many``), then
   the workers start; throughput is activities / (last ``completed_at`` - first ``started_at``),
   read from the rows themselves, so worker start-up time is not counted.
3. **Enqueue-to-start latency** on an idle, listening worker: one activity at a time, spaced
   out; the handler returns ``time.time()`` when it starts, compared with the time just before
   the ``enqueue()`` call (so the enqueue's own commit is included).

Every activity gets the full semantics of the spec: a lease, a result row, the wake-up of
waiters, NOTIFY on the result channel. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runnerq_django import activity  # noqa: E402  (the worker imports this module for these handlers)

QUEUE_BURN = "bench_burn"
QUEUE_LATENCY = "bench_latency"
QUEUE_SINGLE = "bench_single"


@activity(name="bench.noop")
def noop(payload):
    return None


@activity(name="bench.started_at")
def started_at(payload):
    return time.time()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _start_workers(url: str, queue: str, processes: int, concurrency: int, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "RUNNERQ_EXAMPLES": "0", "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "0"}
    return subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--import", "bench.throughput", "--queue", queue,
         "--processes", str(processes), "--concurrency", str(concurrency), "--log-format", "text", "-v", "0", *extra],
        cwd=REPO, env=env, start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_for_pools(queue: str, count: int, timeout: float = 60) -> None:
    from runnerq_django.storage import pools

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = pools.live_capacity(60).get(queue)
        if live and live.workers >= count:
            return
        time.sleep(0.05)
    raise SystemExit(f"workers for {queue} did not register within {timeout}s")


def _count(queue: str, status: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = %s", [queue, status])
        return cursor.fetchone()[0]


def bench_single_enqueue(n: int, producers: int) -> float:
    """``n`` one-by-one enqueues from ``producers`` threads (like concurrent web requests, each
    enqueueing one activity in its own transaction)."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def produce(count: int) -> None:
        try:
            for i in range(count):
                noop.enqueue({"i": i}, queue=QUEUE_SINGLE)
        finally:
            connections.close_all()

    shares = [n // producers + (1 if i < n % producers else 0) for i in range(producers)]
    began = time.perf_counter()
    with ThreadPoolExecutor(producers) as pool:
        list(pool.map(produce, shares))
    return n / (time.perf_counter() - began)


def commit_rate(n: int = 300) -> float:
    """How many durable single-row commits per second one session gets here (the fsync bound)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_commit (x int)")  # not TEMP: temp tables skip the WAL
        began = time.perf_counter()
        for _ in range(n):
            cursor.execute("INSERT INTO bench_commit VALUES (1)")
        rate = n / (time.perf_counter() - began)
        cursor.execute("DROP TABLE bench_commit")
        return rate


def bench_burn_down(url: str, n: int, processes: int, concurrency: int) -> tuple[float, float]:
    from django.db import connection

    for start in range(0, n, 1000):
        noop.enqueue_many([{"i": i} for i in range(start, min(n, start + 1000))], queue=QUEUE_BURN)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runnerq_activities")
    proc = _start_workers(url, QUEUE_BURN, processes, concurrency, [])
    try:
        deadline = time.monotonic() + 600
        while _count(QUEUE_BURN, "completed") < n:
            if proc.poll() is not None:
                raise SystemExit(f"the workers exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit("burn-down did not finish in 10 minutes")
            time.sleep(0.1)
    finally:
        _stop(proc)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM runnerq_activities WHERE queue_name = %s",
            [QUEUE_BURN],
        )
        seconds = float(cursor.fetchone()[0])
    return n / seconds, seconds


def bench_latency(url: str, samples: int, gap: float) -> tuple[list[float], list[float]]:
    from runnerq_django.client import get_handle

    proc = _start_workers(url, QUEUE_LATENCY, 1, 8, [])
    try:
        _wait_for_pools(QUEUE_LATENCY, 1)
        time.sleep(1.0)  # let the listener connect and the first claim round go idle
        sent = []
        for _ in range(samples):
            before = time.time()
            handle = started_at.enqueue(None, queue=QUEUE_LATENCY)
            sent.append((handle.id, before, time.time()))
            time.sleep(gap)
        from_call, from_commit = [], []
        for activity_id, before, after in sent:
            began = get_handle(activity_id, QUEUE_LATENCY).result(timeout=60)
            from_call.append((began - before) * 1000)
            from_commit.append((began - after) * 1000)
        return from_commit, from_call
    finally:
        _stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=20000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--single", type=int, default=5000, help="activities for the one-by-one enqueue rate")
    parser.add_argument("--producers", type=int, default=8, help="threads enqueueing one by one concurrently")
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--latency-gap", type=float, default=0.005, help="seconds between latency samples")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ["DJANGO_DEBUG"] = "0"  # production settings: DEBUG keeps a log of every query
    from tests.helpers import scratch_database
    from testproject.database import database_url

    server = database_url()
    with scratch_database(server, prefix="rq_bench") as url:
        os.environ["DATABASE_URL"] = url
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            pg_version = cursor.fetchone()[0]

        print("runnerq-django throughput benchmark")
        print(f"  machine      {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}")
        print(f"  postgres     {pg_version} at {connection.settings_dict['HOST'] or 'local socket'}")
        print(f"  worker       runworker --processes {args.processes} --concurrency {args.concurrency} "
              f"(lease 30 s, LISTEN on, DEBUG off, log level WARNING), no-op handlers")
        print(f"  fsync bound  {commit_rate():,.0f} durable single-row commits/s from one session")
        rate = bench_single_enqueue(args.single // 5, 1)
        print(f"  enqueue      one-by-one enqueue() (one transaction each), 1 thread: {rate:,.0f}/s")
        rate = bench_single_enqueue(args.single, args.producers)
        print(f"  enqueue      one-by-one enqueue() (one transaction each), {args.producers} threads: {rate:,.0f}/s")
        throughput, seconds = bench_burn_down(url, args.activities, args.processes, args.concurrency)
        print(f"  burn-down    {args.activities} no-op activities in {seconds:.2f} s: {throughput:,.0f} activities/s")
        from_commit, from_call = bench_latency(url, args.latency_samples, args.latency_gap)
        print(f"  latency      enqueue-to-start on an idle worker (1 process x 8 threads), {len(from_commit)} samples:")
        for label, values in (("from enqueue() returning (committed)", from_commit),
                              ("from the enqueue() call (its commit included)", from_call)):
            print(f"                 {label}: p50 {_percentile(values, 50):.2f} ms, p95 {_percentile(values, 95):.2f} ms, "
                  f"p99 {_percentile(values, 99):.2f} ms")
        connection.close()


if __name__ == "__main__":
    main()
