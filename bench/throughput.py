"""Benchmark: runnerq-django beside a raw-SQL floor, in one run on one database server.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/throughput.py \
        [--activities 20000] [--single 1000] [--rounds 3] [--processes 2] [--concurrency 32] [--latency-samples 300]
        [--no-celery] [--celery-broker redis://127.0.0.1:6379/0] [--celery-pool threads]

Creates a scratch database on the server of ``DATABASE_URL`` (dropped afterwards), migrates it,
and measures each activity twice, once with the floor (``bench/floor.py``: psycopg 3, a table of
its own, ``FOR UPDATE SKIP LOCKED``, batches of 100, no spec semantics) and once with
runnerq-django, then prints ours as a ratio to the floor's:

1. **One-by-one enqueue**, one transaction each, from one session: ``enqueue()`` in a loop
   against a plain ``INSERT`` (which is the machine's durable single-session commit rate), in
   ``--rounds`` rounds of ``--single``, the floor's and ours in turn, pooled.
2. **Bulk enqueue** of ``--activities``: ``enqueue_many`` in one transaction (chunks of the
   1,000 a call takes), without and with idempotency keys, against one ``COPY``.
3. **Burn-down** of those ``--activities`` no-ops by ``--processes`` worker processes (real
   ``manage.py runworker``; the floor's own worker processes): activities / (last completion -
   first start), read from the rows. The workers start while the benchmark holds a lock on the
   table, and the measure starts when they all wait for it, so their start-up is not counted.
   Twice: with workers claiming every type they have a handler for (20 in the test project: the
   many-type claim), then, on as many activities again, with workers claiming only the no-op's
   type, the shape of the floor's workers.
4. **Enqueue-to-start latency** on an idle, listening worker: one activity at a time, spaced
   out, the next sent once the last is done; the handler notes ``time.time()`` as it starts,
   compared with the time just before the enqueue call (its own commit included) and just after.
   Beside them, Celery's with a Redis broker (``bench/celery_peer.py``: a real ``celery worker``,
   sampled the same way from ``apply_async``; it flushes the broker's db before and after). The
   three idle workers run together and are sampled in turn, one activity each. Then,
   as context Celery's burn-down of the same ``--activities`` no-ops (a prefork worker of
   ``--processes`` children; published on one connection first; first start to last start).

For each activity it also prints the costs per activity (``bench/meter.py``): client or worker
CPU, Postgres backends' CPU, WAL, transactions, statements and round trips (``bench/counting.py``).

Every activity of ours gets the full semantics of the spec: a lease, a result row, the wake-up of
waiters, NOTIFY on the result channel. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import counting  # noqa: E402
from bench.procs import stop_group  # noqa: E402
from runnerq_django import activity  # noqa: E402  (the worker imports this module for these handlers)

counting.install_from_env()  # in the worker processes the benchmark starts

QUEUE_BURN = "bench_burn"
QUEUE_BURN_ONE = "bench_burn_one"  # the burn-down whose workers claim only bench.noop
QUEUE_KEYED = "bench_keyed"
QUEUE_LATENCY = "bench_latency"
QUEUE_SINGLE = "bench_single"
ACTIVITIES_TABLE = "runnerq_activities"


@activity(name="bench.noop")
def noop(payload):
    return None


@activity(name="bench.started_at")
def started_at(payload):
    return time.time()


@dataclass
class Figure:
    """One measured activity of one side: its rate (or latencies) and its costs."""

    rate: float = 0.0
    cost: object = None  # bench.meter.Cost
    latencies: list[float] = field(default_factory=list)  # ms, from the enqueue call
    from_commit: list[float] = field(default_factory=list)  # ms, from the enqueue call's return


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _worker_env(url: str, counts_dir: str) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": url,
        "RUNNERQ_EXAMPLES": "0",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_DEBUG": "0",
        "RQ_BENCH_COUNTS": counts_dir,
        "PYTHONPATH": str(REPO),
    }


def _start_workers(
    env: dict,
    queue: str,
    processes: int,
    concurrency: int,
    *,
    handlers: str = "bench.throughput",
    types: list[str] | None = None,
) -> subprocess.Popen:
    """``runworker --processes`` on ``queue``, importing the bench's ``handlers`` module; with
    ``types``, claiming only those (``--activity-type``), else every type with a handler."""
    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "runworker",
            "--import",
            handlers,
            "--queue",
            queue,
            "--processes",
            str(processes),
            "--concurrency",
            str(concurrency),
            "--log-format",
            "text",
            "-v",
            "0",
            *(arg for name in types or [] for arg in ("--activity-type", name)),
        ],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )


def _wait_for_pools(queue: str, count: int, timeout: float = 60) -> None:
    from runnerq_django.storage import pools

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = pools.live_capacity(60).get(queue)
        if live and live.workers >= count:
            return
        time.sleep(0.05)
    raise SystemExit(f"workers for {queue} did not register within {timeout}s")


class Gate:
    """Holds an exclusive lock on a table so that workers started now wait at their first claim;
    ``wait_for`` returns once ``count`` sessions wait for it (and no more came for a second)."""

    def __init__(self, url: str, table: str):
        import psycopg

        self.conn = psycopg.connect(url)
        self.table = table
        self.pid = self.conn.info.backend_pid
        self.conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

    def wait_for(self, count: int, procs: list[subprocess.Popen], timeout: float = 60) -> None:
        deadline, seen, steady_since = time.monotonic() + timeout, 0, time.monotonic()
        with self.conn.cursor() as cursor:
            while time.monotonic() < deadline:
                if any(proc.poll() is not None for proc in procs):
                    raise SystemExit("a worker exited before its first claim")
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted",
                    [self.table],
                )
                waiting = cursor.fetchone()[0]
                if waiting != seen:
                    seen, steady_since = waiting, time.monotonic()
                elif waiting >= count and time.monotonic() - steady_since > 1.0:
                    return
                time.sleep(0.05)
        raise SystemExit(f"{count} workers did not reach their first claim within {timeout}s")

    def open(self) -> None:
        self.conn.rollback()
        self.conn.close()


def _timed_burn(
    meter, gate: Gate, procs: list[subprocess.Popen], roots: list[int], n: int, done, exclude: set[int]
):
    """Open the gate, and measure until ``done()`` (one transaction each) reaches ``n``. The cost,
    and the benchmark's own transactions in it (the polls and the gate's)."""
    meter.start(roots, exclude={gate.pid, *exclude})
    gate.open()
    deadline, polls = time.monotonic() + 900, 1
    while done() < n:
        polls += 1
        if any(proc.poll() is not None for proc in procs):
            raise SystemExit("a worker exited during the burn-down")
        if time.monotonic() > deadline:
            raise SystemExit("burn-down did not finish in 15 minutes")
        meter.poll()
        time.sleep(0.25)
    return meter.stop(n), polls + 1


def _count(queue: str, status: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = %s", [queue, status]
        )
        return cursor.fetchone()[0]


def _vacuum_analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def _backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def measure_in_process(meter, items: int, run, close) -> Figure:
    """An activity run by this process; ``close`` closes its session afterwards (so that the
    server reports its transactions). Open the session before: the meter sees the backends
    that are there when it starts and stops."""
    meter.start()
    began = time.perf_counter()
    run()
    rate = items / (time.perf_counter() - began)
    cost = meter.stop(items)
    close()
    return Figure(rate, meter.count_transactions(cost))


def floor_in_process(url: str, meter, items: int, run) -> Figure:
    from bench import floor

    conn = floor.connect(url)
    return measure_in_process(meter, items, lambda: run(conn, items), conn.close)


def ours_in_process(meter, items: int, run, warm_up=None) -> Figure:
    from django.db import connection

    connection.ensure_connection()
    if warm_up is not None:
        warm_up()
    return measure_in_process(meter, items, run, connection.close)


def ours_single_warm_up() -> None:
    """One enqueue before the one-by-one row's measurement (``--warm-up``): the first one imports
    what an enqueue uses on first use (prometheus_client for the counter, opentelemetry when
    tracing is on), about 20 ms of CPU here, 0.02 ms on each of 1,000 enqueues otherwise."""
    noop.enqueue({"i": -1}, queue=QUEUE_SINGLE)


def ours_single(n: int) -> None:
    for i in range(n):
        noop.enqueue({"i": i}, queue=QUEUE_SINGLE)


def one_by_one_in_turn(url: str, meter, args) -> tuple[tuple[Figure, Figure], list[float], Figure]:
    """The one-by-one enqueue, ``--rounds`` rounds of ``--single`` each, the floor's, the schema's
    own floor (``floor.enqueue_one_by_one_spec_tables``) and ours in turn: the commit rate of this
    machine's disk moved by half between runs, so the sides are measured alternately and pooled
    (items over time). Also each round's ratio of ours to the floor's."""
    from bench import floor

    floors, spec_floors, ours = [], [], []
    for round_ in range(args.rounds):
        floors.append(floor_in_process(url, meter, args.single, floor.enqueue_one_by_one))
        spec_floors.append(floor_in_process(url, meter, args.single, floor.enqueue_one_by_one_spec_tables))
        warm_up = ours_single_warm_up if args.warm_up and round_ == 0 else None
        ours.append(ours_in_process(meter, args.single, lambda: ours_single(args.single), warm_up))
    floor.delete_spec_copies(url)
    ratios = [o.rate / f.rate for f, o in zip(floors, ours)]
    return (_pooled(floors), _pooled(ours)), ratios, _pooled(spec_floors)


def _pooled(figures: list[Figure]) -> Figure:
    """Rounds of one measure as one: all their items over all their time, their costs summed."""
    costs = [figure.cost for figure in figures]
    seconds = sum(cost.items / figure.rate for cost, figure in zip(costs, figures))
    total = dataclasses.replace(
        costs[0],
        **{f.name: sum(getattr(cost, f.name) for cost in costs) for f in dataclasses.fields(costs[0])},
    )
    return Figure(total.items / seconds, total)


def ours_bulk(n: int, queue: str, keyed: bool) -> None:
    from django.db import transaction

    from runnerq_django.storage.validation import MAX_BATCH

    payloads = [{"i": i} for i in range(n)]
    with transaction.atomic():
        for start in range(0, n, MAX_BATCH):
            chunk = payloads[start : start + MAX_BATCH]
            keys = [f"bench-{start + i}" for i in range(len(chunk))] if keyed else None
            noop.enqueue_many(chunk, queue=queue, idempotency_keys=keys)


def floor_burn(url: str, meter, env: dict, n: int, processes: int) -> Figure:
    from bench import floor

    with floor.connect(url) as conn:
        conn.execute(f"VACUUM ANALYZE {floor.TABLE}")
    gate = Gate(url, floor.TABLE)
    workers = floor.start_workers(url, processes, env)
    with floor.connect(url) as watcher:
        try:
            gate.wait_for(processes, workers)
            cost, polls = _timed_burn(
                meter,
                gate,
                workers,
                [w.pid for w in workers],
                n,
                lambda: floor.done_and_span(watcher)[0],
                {watcher.info.backend_pid},
            )
        finally:
            floor.stop_workers(workers)
        done, seconds = floor.done_and_span(watcher)
    return Figure(done / seconds, meter.count_transactions(cost, polls + 1))


def ours_burn(
    url: str,
    meter,
    env: dict,
    n: int,
    processes: int,
    concurrency: int,
    py_spy: str | None,
    *,
    queue: str = QUEUE_BURN,
    types: list[str] | None = None,
) -> Figure:
    """The burn-down of ``n`` activities queued on ``queue``; the workers claim ``types`` (``None``:
    every type they have a handler for)."""
    from django.db import connection

    _vacuum_analyze()
    gate = Gate(url, ACTIVITIES_TABLE)
    proc = _start_workers(env, queue, processes, concurrency, types=types)
    profiler = None
    try:
        gate.wait_for(processes, [proc])
        if py_spy:  # every worker process, only the thread running Python (--gil), collapsed stacks
            profiler = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--subprocesses",
                    "--gil",
                    "--format",
                    "raw",
                    "--rate",
                    "1000",
                    "--output",
                    py_spy,
                    "--nonblocking",
                ]
            )
        cost, polls = _timed_burn(
            meter, gate, [proc], [proc.pid], n, lambda: _count(queue, "completed"), {_backend_pid()}
        )
    finally:
        if profiler:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        stop_group(proc)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM runnerq_activities "
            "WHERE queue_name = %s",
            [queue],
        )
        seconds = float(cursor.fetchone()[0])
    connection.close()
    return Figure(n / seconds, meter.count_transactions(cost, polls + 1))


def sample_in_turn(sides: dict[str, tuple], samples: int, gap: float) -> dict[str, Figure]:
    """Enqueue-to-start on idle workers, the sides sampled in turn (each sample one activity on
    one side, sent ``gap`` after the previous one was done; which side goes first rotates), so
    every side meets the machine as it is at the same moments: sampled one side after the other,
    the p50s moved by more than their difference between runs. ``sides``: name -> (``enqueue()``
    returning a reference, ``wait_started(ref)`` returning the ``time.time()`` its handler
    started, once it is done). The first sample of each side warms up (connections, plans) and
    is left out."""
    for enqueue, wait_started in sides.values():
        wait_started(enqueue())
    figures = {name: Figure() for name in sides}
    names = list(sides)
    for index in range(samples):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            enqueue, wait_started = sides[name]
            time.sleep(gap)
            before = time.time()
            ref = enqueue()
            after = time.time()
            began = wait_started(ref)
            figures[name].latencies.append((began - before) * 1000)
            figures[name].from_commit.append((began - after) * 1000)
    return figures


def sample_latency(samples: int, gap: float, enqueue, wait_started) -> Figure:
    """``sample_in_turn`` of one side."""
    return sample_in_turn({"one": (enqueue, wait_started)}, samples, gap)["one"]


def _ours_latency_side(stack: contextlib.ExitStack, env: dict) -> tuple:
    """An idle worker of ours on ``QUEUE_LATENCY`` (stopped when ``stack`` closes): its
    ``(enqueue, wait_started)``."""
    from runnerq_django.client import get_handle

    # Only the type it runs, like the floor's worker (its table holds one kind of job). Without
    # --activity-type it claims every type with a handler here, the test project's examples
    # included: 20 types, so the claim for more than 8 types (bench/claims.py measures that
    # one), which added 1.2-1.5 ms to the p50 in one run (bench/PROFILE.md).
    proc = _start_workers(env, QUEUE_LATENCY, 1, 8, types=[started_at.name])
    stack.callback(stop_group, proc)
    _wait_for_pools(QUEUE_LATENCY, 1)
    return (
        lambda: started_at.enqueue(None, queue=QUEUE_LATENCY).id,
        lambda activity_id: get_handle(activity_id, QUEUE_LATENCY).result(timeout=60),
    )


def ours_latency(env: dict, samples: int, gap: float) -> Figure:
    """Ours alone (bench/pgbouncer.py)."""
    with contextlib.ExitStack() as stack:
        return sample_latency(samples, gap, *_ours_latency_side(stack, env))


def latencies(url: str, env: dict, args) -> tuple[Figure, Figure, Figure | None, str]:
    """The floor's, ours and (when it can run) Celery's enqueue-to-start, sampled in turn with
    the three idle workers running; Celery's setup, or why it was left out."""
    from bench import floor

    floor.reset(url)
    with contextlib.ExitStack() as stack:
        workers = floor.start_workers(url, 1, env)
        stack.callback(floor.stop_workers, workers)
        conn, watcher = stack.enter_context(floor.connect(url)), stack.enter_context(floor.connect(url))
        sides = {
            "floor": (lambda: floor.enqueue_notify(conn), lambda job_id: floor.wait_done(watcher, job_id)),
        }
        sides["ours"] = _ours_latency_side(stack, env)
        celery_setup = _celery_side(args, stack, sides)
        figures = sample_in_turn(sides, args.latency_samples, args.latency_gap)
    return figures["floor"], figures["ours"], figures.get("celery"), celery_setup


def _celery_side(args, stack: contextlib.ExitStack, sides: dict[str, tuple]) -> str:
    """Add Celery's idle worker to ``sides`` (``bench/celery_peer.py``); its setup, or why it
    was left out."""
    if args.no_celery:
        return "--no-celery"
    try:
        from bench import celery_peer
    except ImportError as error:
        return f"celery is not importable ({error})"
    why = celery_peer.unavailable(args.celery_broker)
    if why:
        return why
    try:
        enqueue, wait_started, setup = stack.enter_context(
            celery_peer.latency_side(args.celery_broker, args.celery_pool)
        )
    except (Exception, SystemExit) as error:
        return f"its worker did not start ({type(error).__name__}: {error})"
    sides["celery"] = (enqueue, wait_started)
    return setup


def celery_burn_down(args, n: int) -> tuple[float | None, str]:
    """Celery's burn-down of ``n`` no-ops (``bench/celery_peer.py``: published on one connection,
    then drained by a prefork worker of ``--processes`` children), and its setup; or None and why."""
    from bench import celery_peer

    try:
        return celery_peer.burn_down(
            args.celery_broker, n, "prefork", args.processes, celery_peer.PREFETCH_MULTIPLIER
        )
    except (Exception, SystemExit) as error:
        return None, f"its run failed ({type(error).__name__}: {error})"


def print_celery(pair: tuple[Figure, Figure], celery: Figure | None, setup: str) -> None:
    """The latency beside Celery's, and the target: ours p50 within 2 ms of the floor's,
    and below Celery's."""
    print()
    if celery is None:
        print(f"Celery skipped: {setup}.")
        return
    floor, ours = pair
    print(f"Enqueue-to-start on an idle worker, beside Celery ({setup}):")
    print()
    print("| measure | floor | runnerq-django | Celery with Redis | ratio (ours / Celery) |")
    print("|---|---|---|---|---|")
    for since, values in (
        ("the enqueue call", (floor.latencies, ours.latencies, celery.latencies)),
        (
            "its commit (Celery: apply_async's return)",
            (floor.from_commit, ours.from_commit, celery.from_commit),
        ),
    ):
        for q in (50, 95):
            f, o, c = (_percentile(v, q) for v in values)
            print(
                f"| enqueue-to-start, idle worker, from {since}, p{q} (ms) | {f:.2f} | {o:.2f} | {c:.2f} | "
                f"{_ratio(o, c)} ({o - c:+.2f} ms) |"
            )
    f, o, c = (_percentile(v, 50) for v in (floor.latencies, ours.latencies, celery.latencies))
    met = o - f <= 2 and o < c
    print()
    print(
        f"ours p50 is {_ratio(o, c)} of Celery's ({o - c:+.2f} ms) and {o - f:+.2f} ms from the floor's: "
        f"issue 18's target (within 2 ms of the floor's, below Celery's) is {'met' if met else 'not met'} in this run."
    )


def print_celery_burn(ours: float, n: int, celery: float | None, setup: str) -> None:
    print()
    if celery is None:
        print(f"Celery's burn-down skipped: {setup}.")
        return
    print(
        f"Context: Celery's burn-down of {n:,} no-ops ({setup}; published on one connection before "
        f"the worker starts; first start to last start): {celery:,.0f}/s; ours {ours:,.0f}/s is "
        f"{_ratio(ours, celery)} of it (Celery here acks before the task runs and stores no result)."
    )


def print_setup(args, url: str, wal_method: str) -> None:
    import django
    import psycopg

    with psycopg.connect(url) as conn:
        version, sync, fsync = conn.execute(
            "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
            "current_setting('fsync')"
        ).fetchone()
    print("runnerq-django beside a raw-SQL floor, one run, one server")
    print(
        f"  machine   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start, "
        f"{platform.system()} {platform.release()}"
    )
    print(
        f"  software  Python {platform.python_version()}, Django {django.get_version()}, psycopg {psycopg.__version__}"
    )
    print(f"  postgres  {version} on this machine, synchronous_commit={sync}, fsync={fsync}")
    print(
        f"  workers   burn-down: --processes {args.processes} --concurrency {args.concurrency}, claiming every "
        f"type with a handler (20), then only {noop.name} "
        f"(floor: {args.processes} processes x 1 connection, batches of 100); latency: 1 x 8, "
        f"--activity-type {started_at.name} (floor: 1)"
    )
    print(
        f"  counting  CPU from /proc (workers and their Postgres backends); WAL: {wal_method}; "
        "transactions: pg_stat_database; statements and round trips: psycopg-side (bench/counting.py)"
    )
    print(
        f"  in turn   one by one: {args.rounds} rounds of {args.single:,}, the floor, the schema's own floor, then ours, pooled; "
        f"latency: the idle workers (floor, ours, Celery) sampled in turn, {args.latency_samples} samples each"
    )
    if args.warm_up:
        print("  warm-up   one enqueue before the one-by-one row's measurement (--warm-up)")


def _ratio(ours: float, floor: float) -> str:
    return f"{ours / floor:.2f}" if floor else "-"


def print_figures(figures: dict[str, tuple[Figure, Figure]], floor_names: dict[str, str]) -> None:
    print()
    print("| measure | floor | runnerq-django | ratio (ours / floor) |")
    print("|---|---|---|---|")
    for name, (floor, ours) in figures.items():
        if floor.latencies:
            for since, f_values, o_values in (
                ("the enqueue call", floor.latencies, ours.latencies),
                ("its commit", floor.from_commit, ours.from_commit),
            ):
                for q in (50, 95):
                    f, o = _percentile(f_values, q), _percentile(o_values, q)
                    print(
                        f"| {name}, from {since}, p{q} (ms) | {f:.2f} | {o:.2f} | {_ratio(o, f)} ({o - f:+.2f} ms) |"
                    )
        else:
            print(
                f"| {name} (/s) | {floor.rate:,.0f} ({floor_names[name]}) | {ours.rate:,.0f} | "
                f"{_ratio(ours.rate, floor.rate)} |"
            )
    print()
    print("Per activity (CPU: the enqueuing client's, or the worker processes'; Postgres: its backends'):")
    print()
    print(
        "| measure | side | client/worker CPU ms | Postgres CPU ms | WAL B | transactions | statements | round trips |"
    )
    print("|---|---|---|---|---|---|---|---|")
    printed: set[int] = set()  # a floor figure two of ours share is printed once
    for name, pair in figures.items():
        for side, figure in zip(("floor", "ours"), pair):
            if figure.cost is None or id(figure) in printed:
                continue
            printed.add(id(figure))
            c = figure.cost.per_item()
            print(
                f"| {name} | {side} | {c['client_cpu_ms']:.3f} | {c['pg_cpu_ms']:.3f} | {c['wal_bytes']:,.0f} | "
                f"{c['transactions']:.3g} | {c['statements']:.3g} | {c['round_trips']:.3g} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=20000, help="bulk-enqueued, then burnt down")
    parser.add_argument("--single", type=int, default=1000, help="one-by-one enqueues per round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="one-by-one rounds, the floor's and ours in turn (pooled)"
    )
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="one enqueue before the one-by-one row's measurement (first-use imports out of the figure)",
    )
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--latency-gap", type=float, default=0.005, help="seconds between latency samples")
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="profile our workers during the burn-down (py-spy from "
        "PyPI) into FILE; the profiler slows them, so don't quote that run's figures",
    )
    parser.add_argument("--no-celery", action="store_true", help="leave out Celery's latency")
    parser.add_argument(
        "--celery-broker",
        default=os.environ.get("RQ_BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0"),
        help="Celery's Redis broker (default: $RQ_BENCH_CELERY_BROKER, else db 0 on 127.0.0.1); "
        "its db is flushed before and after",
    )
    parser.add_argument(
        "--celery-pool", choices=("threads", "prefork"), default="threads", help="Celery's worker pool"
    )
    args = parser.parse_args()

    from bench import floor
    from bench.meter import Meter
    from bench.scratch import migrated_database

    counting.install()
    n = args.activities
    with migrated_database() as url, tempfile.TemporaryDirectory() as counts_dir:
        floor.create(url)
        env = _worker_env(url, counts_dir)
        meter = Meter(url, counts_dir)
        print_setup(args, url, meter.wal.method)

        figures: dict[str, tuple[Figure, Figure]] = {}
        single = f"enqueue one by one, 1 session, {args.rounds} x {args.single:,} in turn"
        figures[single], single_ratios, spec_single = one_by_one_in_turn(url, meter, args)
        floor.reset(url)
        copied = floor_in_process(url, meter, n, floor.enqueue_copy)
        figures[f"bulk enqueue of {n:,}, no keys"] = (
            copied,
            ours_in_process(meter, n, lambda: ours_bulk(n, QUEUE_BURN, keyed=False)),
        )
        figures[f"bulk enqueue of {n:,}, keyed"] = (
            copied,
            ours_in_process(meter, n, lambda: ours_bulk(n, QUEUE_KEYED, keyed=True)),
        )
        spec_copy = floor_in_process(url, meter, n, floor.enqueue_copy_spec_tables)
        floor.delete_spec_copies(url)
        burn_floor = floor_burn(url, meter, env, n, args.processes)
        figures[f"burn-down of {n:,} no-ops"] = (
            burn_floor,
            ours_burn(url, meter, env, n, args.processes, args.concurrency, args.py_spy),
        )
        # The same burn-down with workers that claim one type, as the floor's do (a table of one
        # kind of job): the claim is then the one-type walk. The row above is a worker claiming
        # every type with a handler here (the bench's and the test project's examples: 20, so
        # storage.sql.claims.claim_many_types). Beside the same floor figure: one floor run per table.
        ours_bulk(n, QUEUE_BURN_ONE, keyed=False)
        figures[f"burn-down of {n:,} no-ops, workers claiming one type"] = (
            burn_floor,
            ours_burn(
                url,
                meter,
                env,
                n,
                args.processes,
                args.concurrency,
                None,
                queue=QUEUE_BURN_ONE,
                types=[noop.name],
            ),
        )
        floor_started, ours_started, celery, celery_setup = latencies(url, env, args)
        figures["enqueue-to-start, idle worker"] = (floor_started, ours_started)
        celery_burn = celery_burn_down(args, n) if celery is not None else (None, celery_setup)
        meter.close()
        names = {
            single: "INSERT + COMMIT: the commit rate",
            f"burn-down of {n:,} no-ops": "SKIP LOCKED, batches of 100",
            f"burn-down of {n:,} no-ops, workers claiming one type": "the same floor run",
        }
        print_figures(figures, {name: names.get(name, "COPY") for name in figures})
        print()
        floor_single, ours_single_ = figures[single]
        print(
            f"One by one, each round (ours / floor, in turn): {', '.join(f'{r:.2f}' for r in single_ratios)}; "
            f"pooled {_ratio(ours_single_.rate, floor_single.rate)}."
        )
        print()
        print(
            f"The schema's own floor for a one-by-one enqueue: an activity and its input in one "
            f"prepared statement and one durable commit each, straight into runnerq_activities and "
            f"runnerq_inputs (every index they keep; no checks, keys or NOTIFY), in turn with the two "
            f"above: {spec_single.rate:,.0f}/s, {_ratio(spec_single.rate, floor_single.rate)} of the "
            f"commit rate; ours is {_ratio(ours_single_.rate, spec_single.rate)} of it; its Postgres "
            f"CPU {spec_single.cost.per_item()['pg_cpu_ms']:.3f} ms, WAL "
            f"{spec_single.cost.per_item()['wal_bytes']:,.0f} B per activity."
        )
        print()
        print(
            f"The schema's own floor for a bulk enqueue: COPY of {n:,} activities and their inputs into "
            f"runnerq_activities and runnerq_inputs (every index they keep; no checks, keys or NOTIFY): "
            f"{spec_copy.rate:,.0f}/s, {_ratio(spec_copy.rate, copied.rate)} of the floor's COPY; "
            f"ours (no keys) is {_ratio(figures[f'bulk enqueue of {n:,}, no keys'][1].rate, spec_copy.rate)} of it, "
            f"keyed {_ratio(figures[f'bulk enqueue of {n:,}, keyed'][1].rate, spec_copy.rate)}; "
            f"its Postgres CPU {spec_copy.cost.per_item()['pg_cpu_ms']:.3f} ms, "
            f"WAL {spec_copy.cost.per_item()['wal_bytes']:,.0f} B per activity."
        )
        print_celery(figures["enqueue-to-start, idle worker"], celery, celery_setup)
        print_celery_burn(figures[f"burn-down of {n:,} no-ops"][1].rate, n, *celery_burn)


if __name__ == "__main__":
    main()
