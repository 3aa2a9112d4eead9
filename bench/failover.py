"""Benchmark: what a failover loses, with synchronous and with asynchronous replication
(docs/how-to/high-availability.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/failover.py \
        [--modes sync,async] [--rounds 3] [--producers 4] [--load 8]

Each round starts a pg_auto_failover formation of its own (``tests/pg_auto_failover.py``: a
monitor, a primary and a secondary; the secondary in the replication quorum for ``sync``, out of
it for ``async``), migrates it, and runs two workers (``-c 4``) and ``--producers`` producers
(``tests/worker/crash_load.py``: ``enqueue()`` in a loop, each id written down once it returned)
on the formation's multi-host URL. After ``--load`` seconds it notes how far the secondary is
behind (bytes of WAL not yet flushed there), kills the primary (``pg_ctl stop -m immediate``, then
SIGKILL of its keeper), waits for the promotion, lets the producers go on for a few seconds, then
drains and counts on the new primary:

- **enqueues lost**: ids whose ``enqueue()`` returned and that the new primary does not have;
- **completions lost**: activities whose completion the worker acknowledged (its
  ``activity.completed`` line) and that ran again afterwards, or are not completed;
- the seconds from the kill to the promotion and to the first acknowledged completion on it.

The handlers' executions go to a ledger in a scratch database of ``DATABASE_URL``'s server
(dropped afterwards). Not a test: synchronous rounds must show no loss (the test asserts it,
tests/worker/test_failover.py); asynchronous rounds show what the lag at the kill costs here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _round(mode: str, args, ledger_url: str) -> dict:
    import psycopg

    from tests import pg_auto_failover
    from tests.helpers import manage, manage_env, spawn_manage, stop_process, wait_until
    from tests.worker.crash_load import LEDGER_TABLE_SQL

    folder = Path(tempfile.mkdtemp(prefix="rq_bench_failover_"))
    formation = pg_auto_failover.Formation(synchronous=mode == "sync").start()
    children: list[subprocess.Popen] = []
    try:
        url = formation.url("postgres", connect_timeout="2")
        env = manage_env(
            url,
            RUNNERQ_EXAMPLES="0",
            REDIS_URL="",
            RQ_LEDGER_URL=ledger_url,
            DJANGO_SETTINGS_MODULE="tests.worker.settings",
            RUNNERQ_TEST_SETTINGS=json.dumps({"REAPER_INTERVAL_SECONDS": 1, "CONSOLE_ROLLUP_SECONDS": 0}),
        )
        manage("migrate", "runnerq_django", "--verbosity", "0", env=env)
        with psycopg.connect(ledger_url, autocommit=True) as ledger:
            ledger.execute(LEDGER_TABLE_SQL)
            ledger.execute("TRUNCATE rq_crash_ledger")
        logs = []

        def spawn(name: str, command: list[str]) -> subprocess.Popen:
            log = folder / f"{name}.log"
            logs.append(log)
            with open(log, "w") as out:
                if command[0] == "-m":
                    proc = subprocess.Popen(
                        [sys.executable, *command],
                        cwd=REPO,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                else:
                    proc = spawn_manage(*command, env=env, stdout=out, stderr=subprocess.STDOUT)
            children.append(proc)
            return proc

        worker_args = [
            *("runworker", "--import", "tests.worker.crash_load", "-c", "4", "--lease", "3"),
            *("--poll-interval", "0.2", "-v", "2", "--log-format", "json"),
        ]
        workers = [spawn(f"worker-{i}", worker_args) for i in range(2)]
        produced = [folder / f"produced-{i}.txt" for i in range(args.producers)]
        producers = [
            spawn(f"producer-{i}", ["-m", "tests.worker.crash_load", "produce", str(path)])
            for i, path in enumerate(produced)
        ]
        time.sleep(args.load)
        with psycopg.connect(formation.node_url("node1"), autocommit=True) as primary:
            lag = primary.execute(
                "SELECT pg_current_wal_lsn() - flush_lsn, sync_state FROM pg_stat_replication"
            ).fetchone()
        killed_at = formation.kill("node1")
        wait_until(lambda: formation.writable("node2"), timeout=120, interval=0.05, message="the promotion")
        promoted_at = time.time()
        time.sleep(3)
        for proc in producers:
            stop_process(proc, timeout=15)
        with psycopg.connect(url, autocommit=True) as db:
            wait_until(
                lambda: (
                    not db.execute("SELECT 1 FROM runnerq_activities WHERE status <> 'completed'").fetchone()
                ),
                timeout=120,
                interval=0.2,
                message="the backlog to drain",
            )
        for proc in workers:
            stop_process(proc, timeout=30)

        acked = [
            uuid.UUID(line.split()[1])
            for path in produced
            for line in path.read_text().splitlines()
            if line.startswith("ok ")
        ]
        acks: dict[uuid.UUID, float] = {}
        for proc_log in logs[:2]:
            for line in proc_log.read_text().splitlines():
                if line.startswith("{") and '"activity.completed"' in line:
                    with contextlib.suppress(ValueError):
                        record = json.loads(line)
                        at = datetime.fromisoformat(record["ts"]).timestamp()
                        acks[uuid.UUID(record["activity_id"])] = at
        with psycopg.connect(url, autocommit=True) as db:
            present = {
                row[0] for row in db.execute("SELECT id FROM runnerq_activities WHERE id = ANY(%s)", [acked])
            }
            completed = {
                row[0]
                for row in db.execute(
                    "SELECT id FROM runnerq_activities WHERE status = 'completed' AND id = ANY(%s)",
                    [list(acks)],
                )
            }
        with psycopg.connect(ledger_url, autocommit=True) as ledger:
            runs: dict[uuid.UUID, list[float]] = {}
            for activity_id, at in ledger.execute(
                "SELECT activity_id, extract(epoch FROM at)::float8 FROM rq_crash_ledger"
            ):
                runs.setdefault(activity_id, []).append(at)
        ran_again = {a for a, at in acks.items() if max(runs.get(a, [0.0])) > at}
        lost_completions = ran_again | (set(acks) - completed)
        after = [at for at in acks.values() if at > killed_at]
        return {
            "mode": mode,
            "enqueued": len(acked),
            "lost_enqueues": len(set(acked) - present),
            "completed": len(acks),
            "lost_completions": len(lost_completions),
            "lag_bytes": int(lag[0]) if lag else None,
            "sync_state": lag[1] if lag else None,
            "promotion_s": promoted_at - killed_at,
            "first_completion_s": (min(after) - killed_at) if after else None,
        }
    finally:
        for proc in children:
            if proc.poll() is None:
                stop_process(proc, timeout=15)
        formation.stop()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--load", type=float, default=8.0, help="seconds of load before the kill")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker.settings")

    from testproject.database import database_url
    from tests import pg_auto_failover
    from tests.helpers import scratch_database

    why = pg_auto_failover.unavailable()
    if why:
        raise SystemExit(why)
    print("What a failover loses: pg_auto_failover formation, primary killed under load")
    print(
        f"  machine    {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start (shared), "
        f"{platform.system()} {platform.release()}"
    )
    print(
        f"  setup      monitor + primary + secondary on this machine, fsync off, monitor timeouts "
        f"{pg_auto_failover.FAST_MONITOR['pgautofailover.node_considered_unhealthy_timeout']} ms unhealthy, "
        f"{pg_auto_failover.FAST_MONITOR['pgautofailover.primary_demote_timeout']} ms demote; "
        f"2 workers x 4 threads, {args.producers} producers, {args.load:.0f} s of load before the kill"
    )
    results = []
    with scratch_database(database_url(), prefix="rq_bench_failover") as ledger_url:
        for mode in args.modes.split(","):
            for number in range(args.rounds):
                result = _round(mode, args, ledger_url)
                results.append(result)
                print(
                    f"  {mode:5} round {number + 1}: {result['enqueued']} enqueued, {result['lost_enqueues']} lost; "
                    f"{result['completed']} completions, {result['lost_completions']} lost; secondary "
                    f"{result['lag_bytes']} bytes behind ({result['sync_state']}) just before the kill; "
                    f"promoted {result['promotion_s']:.1f} s, first completion "
                    f"{result['first_completion_s'] or float('nan'):.1f} s after the kill",
                    flush=True,
                )
    for mode in args.modes.split(","):
        rows = [r for r in results if r["mode"] == mode]
        print(
            f"{mode}: lost enqueues {sum(r['lost_enqueues'] for r in rows)} of {sum(r['enqueued'] for r in rows)}, "
            f"lost completions {sum(r['lost_completions'] for r in rows)} of {sum(r['completed'] for r in rows)}; "
            f"kill to promotion median {statistics.median(r['promotion_s'] for r in rows):.1f} s, to first "
            f"completion median {statistics.median(r['first_completion_s'] or 0 for r in rows):.1f} s"
        )


if __name__ == "__main__":
    main()
