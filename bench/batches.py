"""Benchmark: a batch handler burning down no-ops beside the one-at-a-time handler (issue 33).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/batches.py \
        [--activities 100000] [--max-size 100] [--processes 2] [--concurrency 100] [--no-floor]

In a scratch database (dropped afterwards), in one run, with the machinery of
``bench/throughput.py`` (real ``manage.py runworker`` processes started behind a lock on the
activities table so their start-up is not timed, ``bench/meter.py``'s costs):

1. **one at a time**: ``--activities`` no-ops of ``@activity(name="bench.batch.single")``;
2. **batch**: as many of ``@activity(name="bench.batch.many", batch=BatchOptions(max_size=...,
   max_wait=0.05 s))``, whose handler takes up to ``--max-size`` of them per call;
3. **floor**: ``bench/floor.py``'s raw-SQL queue (claims of 100, one completing ``UPDATE``), the
   least a Postgres queue does on this machine (``--no-floor`` skips it).

Rate: activities / (last completion - first start), from the rows. A batch gathers at most a
worker's ``--concurrency`` activities (each holds a slot), so run it with ``--concurrency`` at least
``--max-size``. Every activity still gets its own claim row, lease, completion and result: the
batch saves the handler's per-call cost (one API call instead of N), not the queue's per-activity
writes, so a no-op burn-down shows the machinery's cost, and a real handler's saving is its own.
Printed; not a test: nothing is asserted but the setup.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import counting, throughput  # noqa: E402  (throughput installs the counting in workers)
from bench.procs import stop_group  # noqa: E402
from runnerq_django import BatchOptions, activity  # noqa: E402

QUEUE_SINGLE = "bench_batch_single"
QUEUE_BATCH = "bench_batch_many"
MAX_SIZE = int(os.environ.get("RQ_BENCH_BATCH_SIZE", "100"))


@activity(name="bench.batch.single")
def single(payload):
    return None


@activity(name="bench.batch.many", batch=BatchOptions(max_size=MAX_SIZE, max_wait=timedelta(milliseconds=50)))
def many(items):
    return None


def enqueue(definition, queue: str, n: int) -> None:
    from django.db import transaction

    from runnerq_django.storage.validation import MAX_BATCH

    payloads = [{"i": i} for i in range(n)]
    with transaction.atomic():
        for start in range(0, n, MAX_BATCH):
            definition.enqueue_many(payloads[start : start + MAX_BATCH], queue=queue)


def burn(url: str, meter, env: dict, queue: str, n: int, processes: int, concurrency: int):
    from django.db import connection

    throughput._vacuum_analyze()
    gate = throughput.Gate(url, throughput.ACTIVITIES_TABLE)
    proc = throughput._start_workers(env, queue, processes, concurrency, handlers="bench.batches")
    try:
        gate.wait_for(processes, [proc])
        cost, polls = throughput._timed_burn(
            meter,
            gate,
            [proc],
            [proc.pid],
            n,
            lambda: throughput._count(queue, "completed"),
            {throughput._backend_pid()},
        )
    finally:
        stop_group(proc)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM runnerq_activities "
            "WHERE queue_name = %s",
            [queue],
        )
        seconds = float(cursor.fetchone()[0])
    connection.close()
    return throughput.Figure(n / seconds, meter.count_transactions(cost, polls + 1))


def floor_burn(url: str, meter, env: dict, n: int, processes: int):
    from bench import floor

    floor.create(url)
    with floor.connect(url) as conn:
        floor.enqueue_copy(conn, n)
    return throughput.floor_burn(url, meter, env, n, processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=100_000)
    parser.add_argument("--max-size", type=int, default=100)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--no-floor", action="store_true")
    args = parser.parse_args()
    if args.max_size != MAX_SIZE:
        raise SystemExit(f"set RQ_BENCH_BATCH_SIZE={args.max_size} too (the declaration reads it at import)")

    from bench.meter import Meter
    from bench.scratch import migrated_database

    counting.install()
    n = args.activities
    with migrated_database("rq_bench_batch") as url, tempfile.TemporaryDirectory() as counts_dir:
        env = {**throughput._worker_env(url, counts_dir), "RQ_BENCH_BATCH_SIZE": str(MAX_SIZE)}
        meter = Meter(url, counts_dir)
        print("runnerq-django burn-down of a batch handler beside one at a time, one run")
        print(
            f"  machine   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; "
            f"workers --processes {args.processes} --concurrency {args.concurrency}"
        )
        print(f"  workload  {n:,} no-ops each; batch: BatchOptions(max_size={MAX_SIZE}, max_wait=50 ms)")
        enqueue(single, QUEUE_SINGLE, n)
        enqueue(many, QUEUE_BATCH, n)
        throughput._vacuum_analyze()
        figures = {
            "one at a time": burn(url, meter, env, QUEUE_SINGLE, n, args.processes, args.concurrency),
            f"batch of up to {MAX_SIZE}": burn(
                url, meter, env, QUEUE_BATCH, n, args.processes, args.concurrency
            ),
        }
        floor = None if args.no_floor else floor_burn(url, meter, env, n, args.processes)
        meter.close()
        single_rate = figures["one at a time"].rate
        print()
        print("| burn-down | activities/s | / one at a time | / floor | worker CPU ms | Postgres CPU ms |")
        print("|---|---|---|---|---|---|")
        for name, figure in figures.items():
            c = figure.cost.per_item()
            versus_floor = f"{figure.rate / floor.rate:.2f}" if floor else "-"
            print(
                f"| {name} | {figure.rate:,.0f} | {figure.rate / single_rate:.2f} | {versus_floor} | "
                f"{c['client_cpu_ms']:.3f} | {c['pg_cpu_ms']:.3f} |"
            )
        if floor is not None:
            c = floor.cost.per_item()
            print(
                f"| floor (raw SQL, claims of 100) | {floor.rate:,.0f} | {floor.rate / single_rate:.2f} | 1.00 | "
                f"{c['client_cpu_ms']:.3f} | {c['pg_cpu_ms']:.3f} |"
            )


if __name__ == "__main__":
    main()
