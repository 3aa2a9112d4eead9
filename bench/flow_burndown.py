"""Benchmark: a burn-down under a concurrency limit against the same burn-down unlimited.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/flow_burndown.py \
        [--activities 20000] [--partitions 100] [--limit 64] [--processes 2] [--concurrency 32] \
        [--latency-samples 200]

In a scratch database (dropped afterwards), in one run, with the machinery of
``bench/throughput.py`` (real ``manage.py runworker`` processes started behind a lock on the
activities table so their start-up is not timed, ``bench/meter.py``'s costs, ``bench/counting.py``'s
psycopg-side statements and round trips):

1. **Burn-down** of ``--activities`` no-ops, bulk-enqueued (``enqueue_many``) with a payload key
   spread over ``--partitions`` values, once of a type without a limit and once of a type declared
   ``@activity(concurrency=--limit, concurrency_key="k")``: at most ``--limit`` running per
   partition, fleet-wide, slots taken in the claim's own statement. Rate: activities / (last
   completion - first start), from the rows.
2. **Statements per claim batch**: on the limited backlog before its burn-down, claims of a batch
   (``storage.limits.claim_limited``, as the worker calls it), each rolled back, counted by
   ``bench/counting.py``: the statements and round trips of one claim, whatever its batch size.
3. **Enqueue-to-start latency** on an idle listening worker (``throughput.sample_latency``), of
   an unlimited type and of the limited one (a free slot), one activity at a time.

Issue 13's targets: the limited burn-down at least 50% of the unlimited one; one round trip per
claim; the limited p50 latency at most twice the unlimited one. Printed with each figure; not a
test: nothing is asserted but the setup.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import counting, throughput  # noqa: E402  (throughput installs the counting in workers)
from bench.procs import stop_group  # noqa: E402
from runnerq_django import activity  # noqa: E402

QUEUE_FREE = "bench_flow_free"
QUEUE_LIMITED = "bench_flow_limited"
QUEUE_LATENCY = "bench_flow_latency"
# The limit of the limited types. The worker reads it from the declaration; the benchmark's
# --limit sets it through RQ_BENCH_FLOW_LIMIT in the workers' environment (and its own).
LIMIT = int(os.environ.get("RQ_BENCH_FLOW_LIMIT", "64"))


@activity(name="bench.flow.free")
def free(payload):
    return None


@activity(name="bench.flow.limited", concurrency=LIMIT, concurrency_key="k")
def limited(payload):
    return None


@activity(name="bench.flow.free_started_at")
def free_started_at(payload):
    return time.time()


@activity(name="bench.flow.limited_started_at", concurrency=LIMIT, concurrency_key="k")
def limited_started_at(payload):
    return time.time()


def enqueue(definition, queue: str, n: int, partitions: int) -> None:
    from django.db import transaction

    from runnerq_django.storage.validation import MAX_BATCH

    payloads = [{"k": i % partitions} for i in range(n)]
    with transaction.atomic():
        for start in range(0, n, MAX_BATCH):
            definition.enqueue_many(payloads[start : start + MAX_BATCH], queue=queue)


def start_workers(env: dict, queue: str, processes: int, concurrency: int):
    return throughput._start_workers(env, queue, processes, concurrency, handlers="bench.flow_burndown")


def burn(url: str, meter, env: dict, queue: str, n: int, processes: int, concurrency: int):
    from django.db import connection

    throughput._vacuum_analyze()
    gate = throughput.Gate(url, throughput.ACTIVITIES_TABLE)
    proc = start_workers(env, queue, processes, concurrency)
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


def claim_statements(queue: str, limit: int, batches: list[int]) -> list[tuple[int, int, int, float]]:
    """(batch, claimed, statements, round trips) of one limited claim of each batch size, rolled
    back (counted in this process by bench/counting.py), with its milliseconds."""
    from django.db import connection, transaction

    from runnerq_django.storage import limits

    rows = []
    for batch in batches:
        with transaction.atomic():
            with connection.cursor() as cursor:  # psycopg's BEGIN goes with it, not with the claim
                cursor.execute("SELECT 1")
            before = dict(counting.counts)
            began = time.perf_counter()
            claimed = limits.claim_limited(queue, "bench.flow.limited", limit, limit=batch, lease_ms=600_000)
            ms = (time.perf_counter() - began) * 1000
            statements = counting.counts["statements"] - before["statements"]
            trips = counting.counts["round_trips"] - before["round_trips"]
            transaction.set_rollback(True)
        rows.append((batch, len(claimed), statements, trips, ms))
    return rows


def latency(env: dict, definition, samples: int, gap: float):
    from runnerq_django.client import get_handle

    proc = start_workers(env, QUEUE_LATENCY, 1, 8)
    try:
        throughput._wait_for_pools(QUEUE_LATENCY, 1)
        keys = iter(range(10**9))
        return throughput.sample_latency(
            samples,
            gap,
            lambda: definition.enqueue({"k": next(keys) % 100}, queue=QUEUE_LATENCY).id,
            lambda activity_id: get_handle(activity_id, QUEUE_LATENCY).result(timeout=60),
        )
    finally:
        stop_group(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--limit", type=int, default=64, help="running at once per partition")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--latency-gap", type=float, default=0.005)
    args = parser.parse_args()
    if args.limit != LIMIT:
        raise SystemExit(f"set RQ_BENCH_FLOW_LIMIT={args.limit} too (the declarations read it at import)")

    from bench.meter import Meter
    from bench.scratch import migrated_database

    counting.install()
    n = args.activities
    with migrated_database("rq_bench_flow") as url, tempfile.TemporaryDirectory() as counts_dir:
        env = {**throughput._worker_env(url, counts_dir), "RQ_BENCH_FLOW_LIMIT": str(LIMIT)}
        meter = Meter(url, counts_dir)
        print("runnerq-django burn-down under a concurrency limit, against the same unlimited, one run")
        print(
            f"  machine   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; "
            f"workers --processes {args.processes} --concurrency {args.concurrency}"
        )
        print(
            f"  workload  {n:,} no-ops over {args.partitions} partitions; limited: "
            f"@activity(concurrency={LIMIT}, concurrency_key='k')"
        )
        enqueue(free, QUEUE_FREE, n, args.partitions)
        enqueue(limited, QUEUE_LIMITED, n, args.partitions)
        throughput._vacuum_analyze()
        claims = claim_statements(QUEUE_LIMITED, LIMIT, [1, 16, 64, 100])
        figures = {
            "unlimited": burn(url, meter, env, QUEUE_FREE, n, args.processes, args.concurrency),
            "limited": burn(url, meter, env, QUEUE_LIMITED, n, args.processes, args.concurrency),
        }
        waits = {
            "unlimited": latency(env, free_started_at, args.latency_samples, args.latency_gap),
            "limited": latency(env, limited_started_at, args.latency_samples, args.latency_gap),
        }
        meter.close()
        free_rate, limited_rate = figures["unlimited"].rate, figures["limited"].rate
        print()
        print(
            "| burn-down | activities/s | ratio | worker CPU ms | Postgres CPU ms | statements | round trips |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, figure in figures.items():
            c = figure.cost.per_item()
            print(
                f"| {name} | {figure.rate:,.0f} | {figure.rate / free_rate:.2f} | {c['client_cpu_ms']:.3f} | "
                f"{c['pg_cpu_ms']:.3f} | {c['statements']:.3g} | {c['round_trips']:.3g} |"
            )
        print(f"\nlimited / unlimited burn-down: {limited_rate / free_rate:.2f} (target: at least 0.50)")
        print("\n| claim batch | claimed | statements | round trips | ms |")
        print("|---|---|---|---|---|")
        for batch, claimed, statements, trips, ms in claims:
            print(f"| {batch} | {claimed} | {statements} | {trips} | {ms:.1f} |")
        print("\n| enqueue-to-start, idle worker | p50 ms | p95 ms |")
        print("|---|---|---|")
        for name, figure in waits.items():
            p50, p95 = (throughput._percentile(figure.latencies, q) for q in (50, 95))
            print(f"| {name} | {p50:.2f} | {p95:.2f} |")
        ratio = throughput._percentile(waits["limited"].latencies, 50) / throughput._percentile(
            waits["unlimited"].latencies, 50
        )
        print(f"\nlimited / unlimited p50: {ratio:.2f} (target: at most 2)")


if __name__ == "__main__":
    main()
