"""Fixtures of the flow-control tests: the ledger table and ``runworker`` processes that import
both the worker tests' handlers and ``tests.flow.handlers``."""

from __future__ import annotations

import pytest

from tests.flow import handlers
from tests.worker.support import fetch, queue_name, runs_table, worker_processes  # noqa: F401


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
    with worker_processes(live_db_url, tmp_path, "tests.flow.handlers") as start:
        yield start


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
