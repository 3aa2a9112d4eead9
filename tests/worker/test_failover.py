"""A failover of a real high-availability Postgres under load: a pg_auto_failover formation (a
monitor, a primary and a synchronous secondary, ``tests/pg_auto_failover.py``) whose primary is
crashed (``pg_ctl stop -m immediate``, then SIGKILL of its keeper) while workers, a scheduler and
producers run against the formation's multi-host URL (``host=a,b target_session_attrs=read-write``).
The monitor promotes the secondary; the old primary comes back as the new secondary.

What must hold (docs/how-to/high-availability.md):

- every process reconnects to the new primary by itself, without a restart: the producers enqueue
  again, each worker completes activities again and listens again, the scheduler enqueues its
  occurrences again; a worker started while no node takes writes waits for one;
- producers see ``Unavailable`` while no node takes writes, never a raw driver error;
- every activity whose ``enqueue()`` returned is on the new primary afterwards and completes, and
  every completion the worker acknowledged stays completed: with synchronous replication a commit
  returns only once the secondary has it;
- claims and renewals (committed without waiting for the WAL flush, nor for the standby) may be
  lost, which only shows as a re-run of an activity that was in flight at the kill;
- each periodic occurrence has exactly one activity, and none is skipped across the switch.

It prints the time from the kill to the first write the new primary took, to the first acknowledged
enqueue and to the first acknowledged completion on it, and how long the old primary took to
follow again. No timed assertion: those figures are the formation's timeouts (shortened here).

Handler executions are counted in a ledger on the test's own server, which does not fail over.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta

import psycopg
import pytest

from tests import pg_auto_failover
from tests.helpers import manage, manage_env, stop_process, wait_until
from tests.worker.crash_load import LEDGER_TABLE_SQL
from tests.worker.test_server_crash import JOB, _enqueued, _final_state, _json_lines, _spawn

pytestmark = pytest.mark.slow


@pytest.fixture
def formation():
    why = pg_auto_failover.unavailable()
    if why:
        pytest.skip(why)
    started = pg_auto_failover.Formation().start()
    yield started
    started.stop()


@pytest.fixture
def ledger(live_db_url):
    with psycopg.connect(live_db_url, autocommit=True) as conn:
        conn.execute(LEDGER_TABLE_SQL)
        conn.execute("TRUNCATE rq_crash_ledger")
        yield conn
        conn.execute("DROP TABLE IF EXISTS rq_crash_ledger")


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def _events(proc, event: str, since: float = 0.0) -> list[dict]:
    return [
        line
        for line in _json_lines(proc.log())
        if line.get("event") == event and "ts" in line and _ts(line["ts"]) > since
    ]


@pytest.mark.direct_postgres(
    "its processes run on a pg_auto_failover formation of its own, not through the pooler; only its "
    "ledger would, so the pass would test nothing of PgBouncer"
)
def test_a_failover_loses_nothing_acknowledged_and_every_process_follows_the_new_primary(
    formation, ledger, live_db_url, tmp_path
):
    began = time.monotonic()
    # What an operator would put in DATABASE_URL: every node, the writable one chosen by libpq,
    # and a connect timeout so that a node that does not answer costs 2 s, not the OS's minutes.
    url = formation.url("postgres", connect_timeout="2")
    namespace = "f" + uuid.uuid4().hex[:10]
    settings = {
        "REAPER_INTERVAL_SECONDS": 1,
        "CONSOLE_ROLLUP_SECONDS": 0,
        "SCHEDULER": {
            "NAMESPACE": namespace,
            "JOBS": {
                JOB: {"activity": "crash.ledgered", "every": 1, "coalesce": False, "payload": {"tick": True}}
            },
        },
    }
    env = manage_env(
        url,
        RUNNERQ_EXAMPLES="0",
        REDIS_URL="",
        RQ_LEDGER_URL=live_db_url,
        # 20 enqueues a second per producer: well below what the two workers complete on a
        # loaded 2-core machine with three Postgres servers beside them (about 50 a second at a
        # load average of 17), so the backlog drains within the test's time.
        RQ_PRODUCE_PAUSE="0.05",
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps(settings),
    )
    manage("migrate", "runnerq_django", "--verbosity", "0", env=env)

    worker_args = [
        *("runworker", "--import", "tests.worker.crash_load", "-c", "4", "--lease", "3"),
        *("--poll-interval", "0.2", "--shutdown-grace", "5", "-v", "2", "--log-format", "json"),
    ]
    workers = [_spawn(tmp_path, f"worker-{i}", worker_args, env) for i in range(2)]
    scheduler = _spawn(
        tmp_path,
        "scheduler",
        ["runscheduler", "--lease", "3", "--max-interval", "1", "--log-format", "json"],
        env,
    )
    produced = [tmp_path / f"produced-{i}.txt" for i in range(2)]
    producers = [
        _spawn(tmp_path, f"producer-{i}", ["-m", "tests.worker.crash_load", "produce", str(path)], env)
        for i, path in enumerate(produced)
    ]
    children = [*workers, scheduler, *producers]

    def executions(since: float = 0.0, pid: int | None = None) -> int:
        return ledger.execute(
            "SELECT count(*) FROM rq_crash_ledger WHERE at > to_timestamp(%s) AND (%s::int IS NULL OR pid = %s)",
            [since, pid, pid],
        ).fetchone()[0]

    def occurrences(after: float = 0.0) -> int:
        try:
            with psycopg.connect(url, autocommit=True) as db:
                return db.execute(
                    "SELECT count(*) FROM runnerq_periodic_occurrences WHERE namespace = %s AND job_id = %s"
                    " AND occurrence > to_timestamp(%s)",
                    [namespace, JOB, after],
                ).fetchone()[0]
        except psycopg.OperationalError:
            return 0

    def enqueued_since(counts: list[int], more: int) -> bool:
        return all(_enqueued(path) >= count + more for path, count in zip(produced, counts))

    try:
        wait_until(
            lambda: executions() >= 50 and occurrences() >= 2,
            timeout=60,
            interval=0.1,
            message="load and periodic occurrences before the kill",
        )
        before_kill = [_enqueued(path) for path in produced]
        killed_at = formation.kill("node1")
        # A worker started while no node takes writes waits for one, then works like the others.
        late = _spawn(tmp_path, "worker-late", worker_args, env)
        children.append(late)
        workers.append(late)
        wait_until(lambda: formation.writable("node2"), timeout=60, interval=0.05, message="the promotion")
        promoted_at = time.time()

        wait_until(
            lambda: enqueued_since(before_kill, 30),
            timeout=30,
            interval=0.1,
            message="every producer to enqueue on the new primary",
        )
        for proc in workers:
            wait_until(
                lambda proc=proc: executions(promoted_at, proc.pid) >= 20,
                timeout=30,
                interval=0.1,
                message=f"worker {proc.pid} to work on the new primary",
            )
        wait_until(
            lambda: occurrences(promoted_at + 2) >= 1,
            timeout=30,
            interval=0.1,
            message="the scheduler to enqueue occurrences on the new primary",
        )

        # The old primary follows the new one; the processes must not notice (nothing of theirs
        # points at it: a read-write session can't be opened there).
        rejoin_began = time.time()
        formation.rejoin("node1")
        rejoined_at = time.time()
        after_rejoin = [_enqueued(path) for path in produced]
        wait_until(
            lambda: enqueued_since(after_rejoin, 20) and executions(rejoined_at) >= 20,
            timeout=30,
            interval=0.1,
            message="the load to go on once the old primary follows",
        )
        with psycopg.connect(url, autocommit=True) as db:
            assert db.info.port == formation.nodes["node2"].port
            # Synchronous again: the new primary waits for its new standby.
            standbys = db.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
            assert standbys and db.execute("SHOW synchronous_standby_names").fetchone()[0], standbys

        for proc in children:
            assert proc.poll() is None, f"a process died:\n{proc.log()[-3000:]}"
        for proc in [*producers, scheduler]:
            stop_process(proc, timeout=15)
        assert scheduler.returncode == 0, scheduler.log()[-3000:]
        with psycopg.connect(url, autocommit=True) as db:
            wait_until(
                lambda: (
                    not db.execute("SELECT 1 FROM runnerq_activities WHERE status <> 'completed'").fetchone()
                ),
                timeout=90,
                interval=0.2,
                message="every activity to complete",
            )
        # Idle now, each worker's dispatcher waits on its LISTEN session: on the new primary.
        for proc in workers:
            wait_until(
                lambda proc=proc: _listening(proc, killed_at),
                timeout=20,
                interval=0.2,
                message=f"worker {proc.pid} to listen again",
            )
        for proc in workers:
            stop_process(proc, timeout=30)
            assert proc.returncode == 0, proc.log()[-3000:]
        final = _final_state(url, namespace, produced, workers, ledger)
    finally:
        for proc in children:
            if proc.poll() is None:
                stop_process(proc, timeout=15)

    # Every enqueue that returned is on the new primary (and completed, see above); while no node
    # took writes an enqueue raised Unavailable, never a raw driver error.
    assert final["ids"] and final["refusals"], final["refusals"]
    assert set(final["refusals"]) == {"error unavailable Unavailable"}, final["refusals"]
    assert final["found"] == len(final["ids"])

    # One acknowledged completion per activity, and none ran again after it was acknowledged.
    acked = Counter(activity_id for activity_id, _ in final["acks"])
    assert set(acked) == final["completed"] == set(final["runs"]) and max(acked.values()) == 1
    for activity_id, at in final["acks"]:
        assert max(final["runs"][activity_id]) < at, f"{activity_id} ran again after its completion"
    # A re-run only happens to what was in flight at the kill (a claim or renewal the standby never
    # had, a completion not yet acknowledged, a lease that ran out while no node took writes).
    rerun = {activity_id: times for activity_id, times in final["runs"].items() if len(times) > 1}
    for activity_id, times in rerun.items():
        assert min(times) < promoted_at, f"{activity_id} ran {len(times)} times, first after the promotion"
    # Each worker acknowledged completions on the new primary.
    for proc in workers:
        assert _events(proc, "activity.completed", promoted_at), f"worker {proc.pid} completed nothing after"
    # The late worker's start-up waits, if it met the switch (it may take longer than the switch to
    # boot on a loaded machine), named each node with its own reason.
    ports = [str(node.port) for node in formation.nodes.values()]
    for line in _events(late, "database.unreachable"):
        assert all(f"127.0.0.1:{port}: " in line["reason"] for port in ports), line

    # Periodic occurrences: one activity each, none skipped across the switch, some after it.
    periodic = final["occurrences"]
    instants = [instant for instant, _ in periodic]
    assert all(count == 1 for _, count in periodic) and final["periodic"] == len(periodic), periodic
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(instants)), instants
    assert instants[0].timestamp() < killed_at and instants[-1].timestamp() > promoted_at + 2, instants

    first_ok = min(_ts(line["ts"]) for line in _events_all(workers, "activity.completed", killed_at))
    print(
        f"\nfailover: writable {promoted_at - killed_at:.1f} s after the kill, first acknowledged completion"
        f" on the new primary {first_ok - killed_at:.1f} s after it; the old primary followed again in"
        f" {rejoined_at - rejoin_began:.1f} s. {len(final['ids'])} enqueued,"
        f" {sum(final['refusals'].values())} refused, {len(final['completed'])} completed, {len(rerun)} re-run,"
        f" {len(periodic)} occurrences, {time.monotonic() - began:.1f} s in all"
    )


def _listening(proc, since: float) -> list[dict]:
    """The worker's LISTEN lines since ``since``: its first (a dispatcher that never waited has
    not listened yet) or a reconnection's."""
    return [
        *_events(proc, "runnerq.listener.listening", since),
        *_events(proc, "runnerq.listener.reconnected", since),
    ]


def _events_all(procs, event: str, since: float) -> list[dict]:
    return [line for proc in procs for line in _events(proc, event, since)]
