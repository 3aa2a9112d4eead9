"""Benchmark: a large canvas fan-out, beside the same fan-out hand-written with ctx.spawn/wait_all.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/canvas.py \
        [--members 10000] [--hand-written 1000] [--processes 2] [--concurrency 16]

Creates a scratch database on the server of ``DATABASE_URL`` (dropped afterwards), migrates it,
and measures:

1. **Submitting a group's members**: the statements and round trips (``bench/counting.py``) the
   orchestrator's spawn takes for ``--members`` members, run in this process under a real claim
   (the very code the orchestrator runs), and the same count for ``ctx.spawn`` one by one.
2. **A chord over ``--members`` no-op members** run by ``--processes`` real ``runworker``
   processes: time from enqueue to the callback's result, and how often the orchestrator was
   woken (its ``Yielded`` events: each park is one wake-up to come).
3. The same with members taking 0-100 ms each, in an order unrelated to their submission order.
4. The same for a **hand-written** parent spawning ``--hand-written`` children with ``ctx.spawn``
   and awaiting them with ``ctx.wait_all`` (it parks on the first unfinished child), for the
   comparison.

Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import counting  # noqa: E402
from bench.procs import stop_group  # noqa: E402
from runnerq_django import activity  # noqa: E402  (the worker imports this module for these handlers)

QUEUE = "bench_canvas"


@activity(name="bench.cv.item")
def item(x: Any) -> Any:
    return x


@activity(name="bench.cv.jitter")
def jitter(x: int) -> int:
    """0-100 ms, in an order unrelated to the submission order."""
    time.sleep((x * 7919 % 101) / 1000)
    return x


@activity(name="bench.cv.total")
def total(xs: list[int]) -> int:
    return sum(xs)


@activity(name="bench.cv.hand_written")
def hand_written(ctx, n: int) -> int:
    children = [ctx.spawn(item, i, step=f"item-{i}") for i in range(n)]
    return sum(ctx.wait_all(children))


def _start_workers(url: str, processes: int, concurrency: int) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "RUNNERQ_EXAMPLES": "0", "DJANGO_DEBUG": "0"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [
            *(sys.executable, "manage.py", "runworker", "--import", "bench.canvas", "--queue", QUEUE),
            *("--processes", str(processes), "--concurrency", str(concurrency), "-v", "0"),
        ],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )


def _one(sql: str, params: list[Any]) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def _counted(fn) -> tuple[dict[str, int], float]:
    before = dict(counting.counts)
    started = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - started
    return {k: counting.counts[k] - before[k] for k in before}, elapsed


def measure_submit(members: int) -> None:
    """The orchestrator's spawn of ``members`` children, and ctx.spawn one by one, under a claim."""
    from runnerq_django import client, storage
    from runnerq_django.canvas import orchestrator as canvas_orchestrator
    from runnerq_django.worker.context import Context

    for label, n, how in (("canvas spawn (bulk)", members, "bulk"), ("ctx.spawn one by one", 1000, "one")):
        client.enqueue("bench.cv.parent", None, queue=QUEUE + "_submit")
        [claimed] = storage.claim(QUEUE + "_submit", types=["bench.cv.parent"])
        ctx = Context(claimed)
        if how == "bulk":
            run = canvas_orchestrator._Run(ctx)
            template = canvas_orchestrator._member({"type": "bench.cv.item"}, None)
            batch = [canvas_orchestrator._Member(template.activity_type, i, {}, "item") for i in range(n)]
            counts, elapsed = _counted(
                lambda run=run, batch=batch: run.spawn("c", batch, [f"items[{i}]" for i in range(len(batch))])
            )
        else:
            counts, elapsed = _counted(
                lambda ctx=ctx, n=n: [ctx.spawn(item, i, step=f"s{i}") for i in range(n)]
            )
        print(f"| {label} | {n:,} | {counts['statements']:,} | {counts['round_trips']:,} | {elapsed:.2f} s |")


def run_and_time(handle, root_type: str) -> tuple[float, int, int]:
    started = time.monotonic()
    handle.result(timeout=1800)
    elapsed = time.monotonic() - started
    parks = _one(
        "SELECT count(*) FROM runnerq_events WHERE activity_id = %s AND event_type = 'Yielded'", [handle.id]
    )
    children = _one("SELECT count(*) FROM runnerq_activities WHERE parent_activity_id = %s", [handle.id])
    return elapsed, parks, children


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10000)
    parser.add_argument("--hand-written", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    from bench.scratch import migrated_database

    counting.install()
    with migrated_database() as url:
        from runnerq_django.canvas import builder as canvas

        print("| submitting | members | statements | round trips | time |")
        print("|---|---|---|---|---|")
        measure_submit(args.members)

        workers = _start_workers(url, args.processes, args.concurrency)
        try:
            print()
            print("| fan-out | members | time to result | members/s | orchestrator parks (wake-ups) |")
            print("|---|---|---|---|---|")
            for label, n, make in (
                (
                    "chord(map(item), total) canvas",
                    args.members,
                    lambda n: canvas.chord(canvas.map(item, range(n)), total.s()).enqueue(queue=QUEUE),
                ),
                (
                    "chord(map(jitter 0-100 ms), total) canvas",
                    args.members,
                    lambda n: canvas.chord(canvas.map(jitter, range(n)), total.s()).enqueue(queue=QUEUE),
                ),
                (
                    "hand-written ctx.spawn + ctx.wait_all",
                    args.hand_written,
                    lambda n: client_enqueue(n),
                ),
            ):
                handle = make(n)
                elapsed, parks, _children = run_and_time(handle, label)
                print(f"| {label} | {n:,} | {elapsed:.1f} s | {n / elapsed:,.0f} | {parks} |")
        finally:
            stop_group(workers)


def client_enqueue(n: int):
    return hand_written.enqueue(n, queue=QUEUE, timeout=3600)


if __name__ == "__main__":
    main()
