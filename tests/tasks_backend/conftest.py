"""A real ``runworker`` process for the django.tasks backend tests, and helpers to read rows."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import manage_env, spawn_manage, stop_process, wait_until

FAST = ("--poll-interval", "0.2", "--concurrency", "4", "--lease", "10", "--shutdown-grace", "2")


@pytest.fixture
def task_worker(live_db_url, tmp_path):
    """``start(*args)`` -> a ``manage.py runworker`` process on the test database (by default with
    ``--import tests.tasks_backend.tasks``, queues default and reports); ``proc.log()`` reads its
    output. Each is stopped (SIGTERM, then SIGKILL) at teardown."""
    procs = []

    def start(*args: str, imports: bool = True):
        log_path = tmp_path / f"worker-{len(procs)}.log"
        with open(log_path, "w") as log_file:
            extra = ("--import", "tests.tasks_backend.tasks") if imports else ()
            proc = spawn_manage(
                "runworker",
                *extra,
                *FAST,
                *args,
                env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0"),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        proc.log = log_path.read_text
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            stop_process(proc, timeout=15)


def finished(result, timeout: float = 20, proc=None):
    """Refresh ``result`` until it is finished (SUCCESSFUL or FAILED); returns it."""

    def done():
        result.refresh()
        return result.is_finished

    try:
        wait_until(
            done,
            timeout=timeout,
            interval=0.05,
            message=f"task {result.task.module_path} {result.id} to finish",
        )
    except AssertionError:
        if proc is not None:
            print(proc.log())
        raise
    return result


def activity_row(activity_id) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.*, i.payload::text AS payload, i.serialization AS payload_serialization
            FROM runnerq_activities a LEFT JOIN runnerq_inputs i ON i.activity_id = a.id
            WHERE a.id = %s""",
            [activity_id],
        )
        names = [c.name for c in cursor.description]
        row = cursor.fetchone()
    return dict(zip(names, row)) if row else {}


def count_activities() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities")
        return cursor.fetchone()[0]
