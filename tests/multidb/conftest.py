"""Fixtures of the several-databases tests: the ``second`` alias (added by tests/conftest.py on
the embedded PostgreSQL 18, with a test database pytest-django creates and migrates), and the
queues routed to each database."""

from __future__ import annotations

import uuid

import pytest

SECOND = "second"
BOTH = ["default", SECOND]

# Every test here uses both databases: pytest-django creates the second's test database for them.
multidb = pytest.mark.django_db(transaction=True, databases=BOTH)


def fetch(alias: str, sql: str, params=None) -> list[tuple]:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall() if cursor.description else []


def statuses(alias: str, queue: str) -> list[str]:
    return [
        row[0] for row in fetch(alias, "SELECT status FROM runnerq_activities WHERE queue_name = %s", [queue])
    ]


@pytest.fixture
def queues() -> dict[str, str]:
    """A queue on each database, named for this test: ``near`` on default, ``far`` on second."""
    suffix = uuid.uuid4().hex[:8]
    return {"near": f"near_{suffix}", "far": f"far_{suffix}"}


@pytest.fixture
def routed(queues, settings):
    """RUNNERQ with ``far`` on the second database (and both queues served by default)."""
    settings.RUNNERQ = {
        **settings.RUNNERQ,
        "QUEUES": [queues["near"], queues["far"]],
        "QUEUE_DATABASES": {queues["far"]: SECOND},
    }
    return queues
