"""Real ``runworker`` processes through a real PgBouncer (Debian's ``pgbouncer``, started by
``tests/pgbouncer.py`` in front of the test database's server): transaction pooling with the
settings docs/how-to/pgbouncer.md gives, and session pooling with ``LISTEN`` on. Skipped, with the
reason, where pgbouncer is not installed. (``.ci/run`` also runs whole test groups through one.)"""

from __future__ import annotations

import json
import shutil

import pytest

from tests import pgbouncer
from tests.helpers import wait_until, with_dbname
from tests.worker import handlers
from tests.worker.support import fetch, row_of, runs, status_of, wait_for_workers

pytestmark = pytest.mark.slow


@pytest.fixture
def bouncer(live_db_url, runs_table):
    """``start(pool_mode)`` -> a PgBouncer in front of the test database's server (past the
    suite's own PgBouncer, when it runs behind one)."""
    import tempfile

    from testproject.database import database_url

    if not pgbouncer.binary():
        pytest.skip(
            "pgbouncer is not installed (Debian: apt-get install pgbouncer); the PgBouncer tests need it"
        )
    started = []

    def start(pool_mode: str) -> pgbouncer.PgBouncer:
        # Its own folder under /tmp: as root PgBouncer runs as postgres, who can't enter pytest's tmp_path.
        instance = pgbouncer.PgBouncer.start(
            with_dbname(database_url(), "postgres"),
            tempfile.mkdtemp(prefix="rq_pgbouncer_"),
            pool_mode=pool_mode,
        )
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()
        shutil.rmtree(instance.folder, ignore_errors=True)


def _through(bouncer_instance: pgbouncer.PgBouncer, live_db_url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return bouncer_instance.url(conninfo_to_dict(live_db_url)["dbname"])


def _settings(**runnerq) -> dict:
    return {"DJANGO_SETTINGS_MODULE": "tests.worker.settings", "RUNNERQ_TEST_SETTINGS": json.dumps(runnerq)}


def _transactions_through(instance: pgbouncer.PgBouncer, dbname: str) -> int:
    """Transactions PgBouncer carried to ``dbname`` (``SHOW STATS``: total_xact_count)."""
    rows = instance.admin("SHOW STATS")
    return sum(row[1] for row in rows if row[0] == dbname)


def test_a_worker_through_transaction_pooling_runs_work_workflows_and_retries(bouncer, live_db_url, tmp_path):
    """LISTEN off and (before 1.21) prepared statements off: 200 activities each run once, a
    workflow that sleeps, waits for a signal and awaits two children, and a retried failure."""
    from psycopg.conninfo import conninfo_to_dict

    from runnerq_django import signal
    from runnerq_django.exceptions import ActivityFailed
    from tests.worker.support import worker_processes

    pooler = bouncer("transaction")
    url = _through(pooler, live_db_url)
    dbname = conninfo_to_dict(live_db_url)["dbname"]
    before = _transactions_through(pooler, dbname)
    plain = [handlers.counted.enqueue({"i": i}) for i in range(200)]
    flow = handlers.workflow.enqueue({"sleep": 1, "child_seconds": 0.2})
    failing = handlers.always_fails.enqueue({})
    settings = _settings(LISTEN=False, PREPARED_STATEMENTS=pooler.prepared_statements, INLINE_WAIT_SECONDS=0)
    with worker_processes(url, tmp_path, "tests.worker.handlers") as start:
        proc = start("--poll-interval", "0.2", "--concurrency", "8", env=settings)
        wait_for_workers("default", 1)
        wait_until(lambda: runs("slept", flow.id), timeout=60, message="the workflow to sleep and resume")
        signal(flow, "approve", {"by": "ada"})
        assert flow.result(timeout=60) == {"approval": {"by": "ada"}, "children": 2}
        with pytest.raises(ActivityFailed):
            failing.result(timeout=30)
        wait_until(
            lambda: all(status_of(h.id) == "completed" for h in plain), timeout=60, message="200 activities"
        )
        # LISTEN off: its dispatcher never listened (it polls).
        assert "runnerq.listener.listening" not in proc.log()
        assert proc.poll() is None, proc.log()
    log = proc.log()
    assert "Traceback" not in log, log
    counted = fetch("SELECT activity_id, count(*) FROM rq_test_runs WHERE what = 'run' GROUP BY activity_id")
    assert len(counted) == 200 and {n for _, n in counted} == {1}  # each exactly once
    for phase in ("begin", "slept", "signalled", "end"):
        assert len(runs(phase, flow.id)) == 1
    row = row_of(failing.id)
    assert row["status"] == "dead_letter" and row["retry_count"] == 1  # its 2 attempts
    assert _transactions_through(pooler, dbname) - before > 200  # the worker's work went through it


def test_a_worker_through_session_pooling_keeps_listen(bouncer, live_db_url, tmp_path):
    """Session pooling keeps a client's server connection: LISTEN works, so an idle worker
    polling only every 30 s starts new work at once (on the NOTIFY), and results wake waiters."""
    import time

    from tests.worker.support import worker_processes

    pooler = bouncer("session")
    url = _through(pooler, live_db_url)
    with worker_processes(url, tmp_path, "tests.worker.handlers") as start:
        proc = start("--poll-interval", "30", "--concurrency", "2", env=_settings())
        wait_for_workers("default", 1)
        wait_until(
            lambda: "runnerq.listener.listening" in proc.log(), timeout=20, message="the worker's LISTEN"
        )
        time.sleep(0.5)  # its first claims are done: it waits its 30 s, or a NOTIFY
        began = time.monotonic()
        assert handlers.echo.enqueue("notified").result(timeout=10) == "notified"
        assert time.monotonic() - began < 5
