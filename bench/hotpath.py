"""Profile of the hot path: where a no-op activity's time goes.

    DATABASE_URL=... python bench/hotpath.py explain [--activities 20000] [--runs 5]
    DATABASE_URL=... python bench/hotpath.py enqueue [--calls 1000] [--top 25]
    python bench/hotpath.py stacks FILE [--top 25]
    DATABASE_URL=... python bench/hotpath.py replay [--activities 10000] [--batch 18] [--types 19]

``explain``: on a scratch database loaded with ``--activities`` queued activities (plus as many
completed ones, like a queue that has run a while), ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of the
statements the storage layer sends for each hot operation -- a claim of 32, ``complete_many``
of 32, one ``enqueue()`` and ``enqueue_many`` of 1,000 -- captured as psycopg is about to send
them (so exactly the SQL and parameters of the product), each run ``--runs`` times in a
transaction that is rolled back: planning and execution time (medians), buffers, WAL, and the
plan of the last run.

``enqueue``: ``cProfile`` of the client's CPU (``time.process_time``, so waiting for the commit
doesn't count) over ``--calls`` one-by-one ``enqueue()`` calls: the functions by own CPU.

``replay``: the database work of a burn-down without the workers around it: ``claim`` of
``--batch`` then ``complete_many`` of them, over and over, on one connection, until the queue
(``--activities`` no-ops) is empty; the Postgres backend's CPU per activity (from ``/proc``) and
the client's. The worker claims every type it has a handler for: ``--types`` (the benchmark's
worker has 19, so its claim is ``storage.sql.claims.claim_many_types``; 2 to 8 merge walks, 1 is one walk).
Far less noisy than the burn-down on a loaded machine: nothing else runs, nothing waits.

``stacks``: a summary of a ``py-spy record --format raw`` profile (collapsed stacks, e.g. of a
worker during the burn-down: ``python bench/throughput.py --py-spy FILE``, sampled with ``--gil``
so only Python code running counts): the functions with the most samples on top of the stack
(self) and anywhere in it (total).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUEUE = "bench_profile"


class _Captured(Exception):
    pass


def capture(operation) -> list[tuple[str, object, bool]]:
    """The queries ``operation()`` sends in its first round trip (each hot operation is one
    round trip: one query, or statements pipelined up to one Sync), as ``[(sql, params,
    prepared)]``; none is executed: the operation stops there. A one-by-one ``enqueue()`` is
    sent by its usual cursor, not straight to libpq (``db.fetch_value_in_autocommit``): the
    same statement, with its parameters by name."""
    import psycopg

    from runnerq_django.storage import db

    sent: list[tuple[str, object, bool]] = []
    execute = psycopg.Cursor.execute
    straight_to_libpq = db.fetch_value_in_autocommit

    def recording(self, query, params=None, *, prepare=None, binary=None):
        if isinstance(query, bytes):  # sent by number (db.positional): named again, for EXPLAIN
            query, params = _named(query.decode(), params)
        sent.append((query if isinstance(query, str) else query.as_string(self), params, bool(prepare)))
        if self.connection._pipeline is None:
            raise _Captured
        return self  # pipelined: the next statements go in the same round trip

    psycopg.Cursor.execute = recording
    db.fetch_value_in_autocommit = lambda *args, **kwargs: db.NOT_RUN
    try:
        operation()
    except Exception:  # _Captured, or what the operation makes of the results it never got
        if not sent:
            raise
    finally:
        psycopg.Cursor.execute = execute
        db.fetch_value_in_autocommit = straight_to_libpq
    return sent


def _named(query: str, values: list) -> tuple[str, dict]:
    """A statement with numbered parameters ($1 ...) as one with named ones (%(p1)s ...)."""
    named = re.sub(r"\$(\d+)", r"%(p\1)s", query.replace("%", "%%"))
    return named, {f"p{number}": value for number, value in enumerate(values, 1)}


def explain(conn, sql: str, params, runs: int, before: list[tuple[str, object]] = ()) -> dict:
    """Planning and execution medians over ``runs`` without per-node timing (its clock reads
    cost more than some statements), then one plan with it; each run rolled back. ``before``:
    the statements sent ahead of it in the same transaction (run first, not explained)."""
    import psycopg

    planning, execution = [], []
    for run in range(runs + 1):
        timing = "" if run == runs else ", TIMING OFF"
        with conn.transaction(force_rollback=True), psycopg.ClientCursor(conn) as cursor:
            for earlier, earlier_params in before:
                cursor.execute(earlier, earlier_params)
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL{timing}) {sql}", params)
            plan = [row[0] for row in cursor.fetchall()]
        if run == runs:
            break
        for line in plan:
            if match := re.match(r"\s*Planning Time: ([\d.]+) ms", line):
                planning.append(float(match.group(1)))
            if match := re.match(r"\s*Execution Time: ([\d.]+) ms", line):
                execution.append(float(match.group(1)))
    return {"planning": statistics.median(planning), "execution": statistics.median(execution), "plan": plan}


def _statements(sql: str) -> list[str]:
    """The statements of a multi-statement query, transaction control left out."""
    parts = [part.strip() for part in sql.split(";\n")]
    return [part for part in parts if part and part.upper() not in ("BEGIN", "COMMIT")]


def scratch_django():
    """A migrated scratch database, Django set up on it; its URL."""
    from bench.scratch import migrated_database

    return migrated_database()


def run_enqueue(args) -> None:
    import cProfile
    import pstats
    import time

    with scratch_django():
        from bench.throughput import noop

        noop.enqueue({"i": -1}, queue=QUEUE)  # connection, prepared statement, imports
        profiler = cProfile.Profile(time.process_time)
        began = time.process_time()
        profiler.runcall(lambda: [noop.enqueue({"i": i}, queue=QUEUE) for i in range(args.calls)])
        cpu_ms = (time.process_time() - began) * 1000 / args.calls
        print(
            f"client CPU per enqueue(): {cpu_ms:.3f} ms (under cProfile, which adds to it), {args.calls:,} calls"
        )
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler).sort_stats(order).print_stats(args.top)


def run_bulk(args) -> None:
    """``enqueue_many`` of ``--activities`` in one transaction (chunks of 1,000 a call), without
    and with keys: wall time and client CPU per activity, then a ``cProfile`` of one more run."""
    import cProfile
    import pstats
    import time

    with scratch_django():
        from bench.throughput import ours_bulk

        ours_bulk(10, QUEUE, keyed=False)  # connection, imports
        ours_bulk(10, QUEUE + "_k", keyed=True)
        for keyed in (False, True):
            for run in range(args.runs):
                queue = f"{QUEUE}_{keyed:d}_{run}"
                began, cpu = time.perf_counter(), time.process_time()
                ours_bulk(args.activities, queue, keyed=keyed)
                wall, cpu = time.perf_counter() - began, time.process_time() - cpu
                print(
                    f"{'keyed' if keyed else 'no keys'}: {args.activities / wall:,.0f}/s, "
                    f"client CPU {cpu * 1000 / args.activities:.4f} ms per activity"
                )
        if args.top:
            profiler = cProfile.Profile(time.process_time)
            profiler.runcall(lambda: ours_bulk(args.activities, QUEUE + "_p", keyed=args.keyed))
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


def run_explain(args) -> None:
    import psycopg

    with scratch_django() as url:
        from django.db import connection

        from bench.throughput import noop
        from runnerq_django import storage

        for start in range(0, 2 * args.activities, 1000):
            end = min(start + 1000, 2 * args.activities)
            noop.enqueue_many([{"i": i} for i in range(start, end)], queue=QUEUE)
        done = 0
        while done < args.activities:  # half of them completed: a queue that has been running
            limit = min(1000, args.activities - done)
            claimed = storage.claim(QUEUE, types=["bench.noop"], limit=limit, worker_id="bench")
            storage.complete_many(QUEUE, [(c.claim, None) for c in claimed])
            done += len(claimed)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        claimed = storage.claim(QUEUE, types=["bench.noop"], limit=32, worker_id="bench")
        operations = {
            "claim of 32": lambda: storage.claim(QUEUE, types=["bench.noop"], limit=32, worker_id="bench"),
            "complete_many of 32": lambda: storage.complete_many(QUEUE, [(c.claim, None) for c in claimed]),
            "enqueue() one, no key": lambda: noop.enqueue({"i": 0}, queue=QUEUE),
            "enqueue_many of 1,000": lambda: noop.enqueue_many([{"i": i} for i in range(1000)], queue=QUEUE),
        }
        with psycopg.connect(url, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            print(
                f"EXPLAIN (ANALYZE, BUFFERS, WAL), PostgreSQL {version}, {args.activities:,} queued and "
                f"{done:,} completed activities, medians of {args.runs} runs with TIMING OFF (each rolled back)"
            )
            for name, operation in operations.items():
                captured = [
                    (statement, params, prepared)
                    for sql, params, prepared in capture(operation)
                    for statement in _statements(sql)
                ]
                for number, (statement, params, prepared) in enumerate(captured, 1):
                    earlier = [(sql, values) for sql, values, _ in captured[: number - 1]]
                    result = explain(conn, statement, params, args.runs, earlier)
                    print(
                        f"\n## {name}, statement {number}{' (prepared by the product)' if prepared else ''}: "
                        f"planning {result['planning']:.3f} ms, execution {result['execution']:.3f} ms"
                    )
                    print("\n".join(result["plan"]))


def _backend_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def run_replay(args) -> None:
    import time

    types = ["bench.noop", "bench.started_at", *(f"other.{i}" for i in range(args.types - 2))][: args.types]
    with scratch_django():
        from django.db import connection

        from bench.throughput import noop
        from runnerq_django import storage

        for start in range(0, args.activities, 1000):
            noop.enqueue_many([{"i": i} for i in range(start, start + 1000)], queue=QUEUE)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("SELECT pg_backend_pid()")
            [pid] = cursor.fetchone()
        backend, client, began = _backend_cpu_ms(pid), time.process_time(), time.perf_counter()
        done = rounds = 0
        while claimed := storage.claim(QUEUE, types=types, limit=args.batch, worker_id="bench"):
            storage.complete_many(QUEUE, [(c.claim, None) for c in claimed])
            done, rounds = done + len(claimed), rounds + 1
        backend = _backend_cpu_ms(pid) - backend
        client = (time.process_time() - client) * 1000
        wall = (time.perf_counter() - began) * 1000
        print(
            f"replay: {done:,} activities, {len(types)} types, claim and complete in batches of {args.batch} "
            f"({rounds:,} rounds), load average {os.getloadavg()[0]:.1f}\n"
            f"  per activity: Postgres CPU {backend / done:.4f} ms, client CPU {client / done:.4f} ms, "
            f"wall {wall / done:.4f} ms"
        )


def run_stacks(args) -> None:
    """Self and total samples per function of a collapsed-stack file (``frame;frame;... count``)."""
    own, anywhere, total = Counter(), Counter(), 0
    for line in Path(args.file).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [
            frame for frame in stack.split(";") if frame and not frame.startswith(("process ", "thread "))
        ]
        if not frames:
            continue
        samples = int(count)
        total += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            anywhere[frame] += samples
    print(f"{total:,} samples holding the GIL")
    for title, counter in (("self", own), ("total", anywhere)):
        print(f"\ntop {args.top} by {title} samples:")
        for frame, samples in counter.most_common(args.top):
            print(f"  {100 * samples / max(1, total):5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    explain_parser = commands.add_parser("explain")
    explain_parser.add_argument("--activities", type=int, default=20000)
    explain_parser.add_argument("--runs", type=int, default=5)
    enqueue_parser = commands.add_parser("enqueue")
    enqueue_parser.add_argument("--calls", type=int, default=1000)
    enqueue_parser.add_argument("--top", type=int, default=25)
    bulk_parser = commands.add_parser("bulk", help=run_bulk.__doc__)
    bulk_parser.add_argument("--activities", type=int, default=20000)
    bulk_parser.add_argument("--runs", type=int, default=3)
    bulk_parser.add_argument("--top", type=int, default=0, help="then cProfile one run: the top functions")
    bulk_parser.add_argument("--keyed", action="store_true", help="profile the keyed run")
    stacks_parser = commands.add_parser("stacks")
    replay_parser = commands.add_parser("replay", help=run_replay.__doc__)
    replay_parser.add_argument("--activities", type=int, default=10000)
    replay_parser.add_argument("--batch", type=int, default=18, help="the burn-down's claims average ~18")
    replay_parser.add_argument("--types", type=int, default=19, help="types the worker claims")
    stacks_parser.add_argument("file")
    stacks_parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    {
        "explain": run_explain,
        "enqueue": run_enqueue,
        "bulk": run_bulk,
        "stacks": run_stacks,
        "replay": run_replay,
    }[args.command](args)


if __name__ == "__main__":
    main()
