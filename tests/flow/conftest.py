"""Fixtures of the flow-control tests: the ledger table and ``runworker`` processes that import
both the worker tests' handlers and ``tests.flow.handlers``."""

from __future__ import annotations

import subprocess

import pytest

from tests.flow import handlers
from tests.helpers import manage_env, spawn_manage, stop_process
from tests.worker.support import fetch, queue_name, runs_table  # noqa: F401


@pytest.fixture
def ledger(transactional_db):
    fetch(handlers.LEDGER_SQL)
    fetch("TRUNCATE rq_flow_ledger")
    yield
    fetch("DROP TABLE IF EXISTS rq_flow_ledger")


@pytest.fixture
def flow_worker(live_db_url, ledger, tmp_path):
    """``start(*args)`` -> a ``runworker --import tests.flow.handlers`` process on the test
    database (output in a file, ``proc.log()``); every one still running is stopped at teardown."""
    procs = []

    def start(*args: str, env: dict | None = None):
        log_path = tmp_path / f"worker-{len(procs)}.log"
        with open(log_path, "w") as log_file:
            proc = spawn_manage(
                "runworker",
                "--import",
                "tests.flow.handlers",
                *args,
                env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0", **(env or {})),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        proc.log = log_path.read_text
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            stop_process(proc, timeout=30)


def ledger_rows(activity_id=None) -> list[tuple]:
    sql = (
        "SELECT activity_id, activity_type, attempt, pid, partition, started_at, ended_at"
        " FROM rq_flow_ledger WHERE true"
    )
    params = []
    if activity_id is not None:
        sql += " AND activity_id = %s"
        params.append(activity_id)
    return fetch(sql + " ORDER BY seq", params)
