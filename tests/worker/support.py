"""Fixtures and helpers of the worker and client tests (imported by both conftests).

Two ways to run a worker against the test database:

- ``worker`` (in-process): a :class:`~runnerq_django.worker.runtime.Worker` started in this
  process on its own threads, for API and semantics tests (fast; handlers can share memory with
  the test);
- ``worker_process`` (a real ``manage.py runworker`` process), for crashes, signals and load.

Both import ``tests.worker.handlers``. The example tour is turned off (``RUNNERQ_EXAMPLES=0``).
"""

from __future__ import annotations

import subprocess
import uuid
from contextlib import contextmanager

import pytest

from tests.helpers import manage_env, spawn_manage, stop_process, wait_until
from tests.worker import handlers


def fetch(sql: str, params=None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall() if cursor.description else []


def status_of(activity_id) -> str | None:
    rows = fetch("SELECT status FROM runnerq_activities WHERE id = %s", [activity_id])
    return rows[0][0] if rows else None


def row_of(activity_id) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM runnerq_activities WHERE id = %s", [activity_id])
        names = [c.name for c in cursor.description]
        row = cursor.fetchone()
    return dict(zip(names, row)) if row else {}


def events_of(activity_id) -> list[str]:
    return [
        r[0]
        for r in fetch(
            "SELECT event_type FROM runnerq_events WHERE activity_id = %s ORDER BY id", [activity_id]
        )
    ]


def wait_for_status(activity_id, *statuses: str, timeout: float = 20) -> str:
    return wait_until(
        lambda: (s := status_of(activity_id)) in statuses and s,
        timeout=timeout,
        message=f"activity {activity_id} to reach {statuses} (now {status_of(activity_id)})",
    )


def runs(what: str | None = None, activity_id=None) -> list[tuple]:
    sql = "SELECT activity_id, what, attempt, pid FROM rq_test_runs WHERE true"
    params = []
    if what is not None:
        sql += " AND what = %s"
        params.append(what)
    if activity_id is not None:
        sql += " AND activity_id = %s"
        params.append(activity_id)
    return fetch(sql + " ORDER BY seq", params)


@pytest.fixture
def runs_table(transactional_db):
    fetch(handlers.RUNS_TABLE_SQL)
    fetch("DELETE FROM rq_test_runs")  # rows a run that died left (DELETE: no new file, as in tests/flush.py)
    handlers.CALLS.clear()
    yield
    fetch("DROP TABLE IF EXISTS rq_test_runs")


@pytest.fixture
def queue_name() -> str:
    return "t_" + uuid.uuid4().hex[:12]


@pytest.fixture
def worker(transactional_db, runs_table, monkeypatch):
    """``start(**options)`` -> a started in-process Worker; all are drained at teardown."""
    from runnerq_django.worker.options import WorkerOptions
    from runnerq_django.worker.runtime import Worker

    monkeypatch.setenv("RUNNERQ_EXAMPLES", "0")  # the examples' tour would add work to the queue
    started = []

    def start(**overrides) -> Worker:
        options = WorkerOptions(
            concurrency=4,
            lease_seconds=10,
            heartbeat_seconds=1,
            shutdown_grace_seconds=5,
            poll_interval_seconds=0.2,
        )
        for name, value in overrides.items():
            setattr(options, name, value)
        instance = Worker(options)
        instance.start()
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.request_stop("test over")
        instance.drain()


@contextmanager
def worker_processes(live_db_url: str, tmp_path, handlers_module: str):
    """``start(*args)`` -> a ``runworker --import <handlers_module>`` process on the test
    database, its output going to a file (``proc.log()`` reads it; a pipe nobody drains could
    fill up and stall the worker). Every one still running is stopped (SIGTERM, then SIGKILL)
    when the block ends."""
    procs = []

    def start(*args: str, env: dict | None = None):
        log_path = tmp_path / f"worker-{len(procs)}.log"
        with open(log_path, "w") as log_file:  # the child has its own copy of the descriptor
            proc = spawn_manage(
                "runworker",
                "--import",
                handlers_module,
                *args,
                env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0", **(env or {})),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        proc.log = log_path.read_text
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_process(proc, timeout=30)


@pytest.fixture
def worker_process(live_db_url, runs_table, tmp_path):
    """``start(*args)`` -> a ``runworker --import tests.worker.handlers`` process
    (``worker_processes``)."""
    with worker_processes(live_db_url, tmp_path, "tests.worker.handlers") as start:
        yield start


def wait_for_workers(queue: str, count: int, timeout: float = 30) -> None:
    """Until ``count`` worker processes registered their pool rows for ``queue``."""
    from runnerq_django.storage import pools

    wait_until(
        lambda: (live := pools.live_capacity(60).get(queue)) is not None and live.workers >= count,
        timeout=timeout,
        message=f"{count} worker(s) registered on {queue}",
    )
