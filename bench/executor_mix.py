"""Benchmark: the executor's two hand-offs in real workers, a burn-down and an I/O-bound mix.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/executor_mix.py \\
        [--pythons python3,/root/.pyenv/versions/3.13.0/bin/python3] [--rounds 3] \\
        [--activities 20000] [--processes 2] [--concurrency 32] \\
        [--io 3000] [--io-concurrency 16] [--no-io]

On a migrated scratch database (dropped afterwards), for each worker Python of ``--pythons`` and
each hand-off (``queue``: ``QueueHandoffPool``, the one before issue 27 and still that of
Pythons before 3.13; ``watched``: ``ExecutorPool``, one wake-up per batch and a watcher), real
``manage.py runworker`` processes started behind a lock on the table (``bench/throughput.py``'s
gate: their start-up is not timed) run:

1. **Burn-down**: ``--activities`` no-ops by ``--processes`` x ``--concurrency`` threads. Rate:
   activities / (last completion - first start), read from the rows; the workers' CPU per
   activity (user and system, from ``/proc``).
2. **I/O-bound mix**: ``--io`` activities by one process of ``--io-concurrency`` threads, a third
   returning at once, a third waiting 5 ms and a third 20 ms (``time.sleep``, the GIL free, as a
   network call would leave it). The rate, the workers' CPU per activity, and the p50 and p99 of
   each activity's wait from its claim to its handler's start (``started_at`` of the row to the
   handler's first line, both on this machine's clock: the hand-off's delay, plus the claim's
   own round trip).

The sides alternate within each round; the figures are medians over the rounds. The hand-off is
chosen in the worker by this module (``RQ_BENCH_HANDOFF``, read when runworker imports it).
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runnerq_django import activity  # noqa: E402

QUEUE_BURN = "bench_mix_burn"
QUEUE_IO = "bench_mix_io"
ACTIVITIES_TABLE = "runnerq_activities"
IO_WAITS_MS = (0, 5, 20)


@activity(name="bench.mix_noop")
def mix_noop(payload):
    return None


@activity(name="bench.mix_io")
def mix_io(payload):
    began = time.time()
    if payload["ms"]:
        time.sleep(payload["ms"] / 1000)
    return began


def _choose_handoff() -> None:
    """In a worker started by this benchmark: the hand-off it asked for."""
    kind = os.environ.get("RQ_BENCH_HANDOFF")
    if kind is None:
        return
    from runnerq_django.worker import executor, runtime

    pool_class = {"queue": executor.QueueHandoffPool, "watched": executor.ExecutorPool}[kind]

    def chosen(size, run, **options):
        return pool_class(size, run, **options)

    runtime.executor_pool = chosen


_choose_handoff()


def _start(
    python: str, env: dict, handoff: str, queue: str, activity_type: str, processes: int, threads: int
):
    return subprocess.Popen(
        [
            python,
            "manage.py",
            "runworker",
            "--import",
            "bench.executor_mix",
            "--queue",
            queue,
            "--activity-type",
            activity_type,
            "--processes",
            str(processes),
            "--concurrency",
            str(threads),
            "--log-format",
            "text",
            "-v",
            "0",
        ],
        cwd=REPO,
        env={**env, "RQ_BENCH_HANDOFF": handoff},
        start_new_session=True,
    )


def _fetch(sql: str, params: list) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _clear() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("runnerq_results", "runnerq_inputs", "runnerq_events", "runnerq_activities"):
            cursor.execute(f"DELETE FROM {table}")
        cursor.execute("VACUUM ANALYZE")


def _enqueue(handler, payloads: list, queue: str) -> None:
    from django.db import transaction

    from runnerq_django.storage.validation import MAX_BATCH

    with transaction.atomic():
        for start in range(0, len(payloads), MAX_BATCH):
            handler.enqueue_many(payloads[start : start + MAX_BATCH], queue=queue)


def _run(url: str, env: dict, python: str, handoff: str, queue: str, handler, payloads, processes, threads):
    """Burn down ``payloads`` of ``handler`` on ``queue``: (rate, worker CPU ms per activity)."""
    from bench.meter import descendants, process_cpu_ms
    from bench.procs import stop_group
    from bench.throughput import Gate

    _clear()
    _enqueue(handler, payloads, queue)
    n = len(payloads)
    gate = Gate(url, ACTIVITIES_TABLE)
    proc = _start(python, env, handoff, queue, handler.name, processes, threads)
    try:
        gate.wait_for(processes, [proc])
        pids = descendants(proc.pid)
        cpu_before = sum(ms for ms in map(process_cpu_ms, pids) if ms is not None)
        gate.open()
        deadline = time.monotonic() + 600
        while True:
            done = _fetch(
                "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'completed'",
                [queue],
            )[0][0]
            if done >= n:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the workers exited or took over 10 minutes")
            time.sleep(0.1)
        cpu = sum(ms for ms in map(process_cpu_ms, pids) if ms is not None) - cpu_before
    finally:
        stop_group(proc)
    seconds = _fetch(
        "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM runnerq_activities "
        "WHERE queue_name = %s",
        [queue],
    )[0][0]
    return n / float(seconds), cpu / n


def _claim_to_start_ms(queue: str) -> list[float]:
    """Each I/O activity's wait from its claim (the row's ``started_at``) to its handler's first line."""
    rows = _fetch(
        "SELECT extract(epoch FROM a.started_at), r.data FROM runnerq_activities a "
        "JOIN runnerq_results r ON r.activity_id = a.id WHERE a.queue_name = %s",
        [queue],
    )
    import json

    waits = []
    for started, result in rows:
        began = json.loads(result) if isinstance(result, str) else result
        if isinstance(began, dict):  # a superjson envelope
            began = began.get("json")
        waits.append((float(began) - float(started)) * 1000)
    return sorted(waits)


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", default=sys.executable, help="worker interpreters, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--activities", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--io", type=int, default=3000)
    parser.add_argument("--io-concurrency", type=int, default=16)
    parser.add_argument("--handoffs", default="queue,watched")
    parser.add_argument("--no-io", action="store_true", help="the burn-down alone")
    args = parser.parse_args()

    from bench.scratch import migrated_database
    from bench.throughput import _worker_env

    pythons = args.pythons.split(",")
    handoffs = args.handoffs.split(",")
    burn_payloads = [{"i": i} for i in range(args.activities)]
    io_payloads = [{"i": i, "ms": IO_WAITS_MS[i % len(IO_WAITS_MS)]} for i in range(args.io)]
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    with migrated_database("rq_bench_mix") as url, tempfile.TemporaryDirectory() as counts_dir:
        env = _worker_env(url, counts_dir)
        versions = {
            python: subprocess.run(
                [python, "-c", "import platform; print(platform.python_version())"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            for python in pythons
        }
        for round_index in range(args.rounds):
            for python in pythons:
                order = handoffs if round_index % 2 == 0 else handoffs[::-1]
                for handoff in order:
                    figures = results.setdefault((versions[python], handoff), {})
                    rate, cpu = _run(
                        url, env, python, handoff, QUEUE_BURN, mix_noop, burn_payloads,
                        args.processes, args.concurrency,
                    )  # fmt: skip
                    figures.setdefault("burn_rate", []).append(rate)
                    figures.setdefault("burn_cpu", []).append(cpu)
                    if args.no_io:
                        continue
                    rate, cpu = _run(
                        url, env, python, handoff, QUEUE_IO, mix_io, io_payloads, 1, args.io_concurrency
                    )
                    waits = _claim_to_start_ms(QUEUE_IO)
                    figures.setdefault("io_rate", []).append(rate)
                    figures.setdefault("io_cpu", []).append(cpu)
                    figures.setdefault("io_p50", []).append(_percentile(waits, 50))
                    figures.setdefault("io_p99", []).append(_percentile(waits, 99))
                for handoff in order:
                    figures = results[(versions[python], handoff)]
                    print(
                        f"round {round_index + 1}, Python {versions[python]}, {handoff}: "
                        + ", ".join(f"{k} {v[-1]:.3f}" for k, v in figures.items()),
                        flush=True,
                    )
    print()
    print(
        f"Burn-down: {args.activities:,} no-ops, {args.processes} processes x {args.concurrency} threads. "
        f"I/O mix: {args.io:,} activities (a third each of 0, 5 and 20 ms of time.sleep), 1 process x "
        f"{args.io_concurrency} threads. Medians of {args.rounds} rounds, the sides in turn."
    )
    print()
    print(
        "| Python | hand-off | burn-down/s | worker CPU ms/activity | I/O mix/s | worker CPU ms/activity "
        "| claim to start p50 ms | p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (version, handoff), figures in results.items():
        m = {name: statistics.median(values) for name, values in figures.items()}
        if args.no_io:
            m.update(io_rate=0.0, io_cpu=0.0, io_p50=0.0, io_p99=0.0)
        print(
            f"| {version} | {handoff} | {m['burn_rate']:,.0f} | {m['burn_cpu']:.3f} | {m['io_rate']:,.0f} "
            f"| {m['io_cpu']:.3f} | {m['io_p50']:.2f} | {m['io_p99']:.2f} |"
        )


if __name__ == "__main__":
    main()
