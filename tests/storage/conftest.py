"""Storage-test fixtures.

Storage operations run as in production: each call is its own transaction in autocommit, on the
test database, so that what a test sees is what a worker would see (committed rows, NOTIFY,
SKIP LOCKED across connections). Every test gets a queue of its own instead of flushed tables,
and at the end every event it left must match ``events.schema.json``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from runnerq_django.storage.store import StorageOperations
from tests.helpers import SPEC_DIR

STORAGE_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    """Every storage test runs without a wrapping transaction (statements commit as a worker's
    do); pytest-django then empties the RunnerQ tables after each test."""
    marker = pytest.mark.django_db(transaction=True, available_apps=["runnerq_django"])
    for item in items:
        if STORAGE_TESTS in Path(str(item.fspath)).resolve().parents and not item.get_closest_marker(
            "django_db"
        ):
            item.add_marker(marker)


@pytest.fixture
def storage_db(transactional_db):
    """Database access without a wrapping transaction (so statements commit like a worker's)."""


@pytest.fixture(scope="session")
def events_schema() -> dict:
    return json.loads((SPEC_DIR / "schema" / "postgres" / "events.schema.json").read_text())


@pytest.fixture
def queue(storage_db, events_schema) -> str:
    """A fresh queue name; afterwards its events must validate against events.schema.json."""
    from jsonschema import Draft202012Validator

    from tests.helpers import format_checker

    name = "st_" + uuid.uuid4().hex[:16]
    yield name
    from tests.storage.support import sql_rows

    for event_type, worker_id, detail in sql_rows(
        "SELECT event_type, worker_id, COALESCE(detail, 'null'::jsonb)::text FROM runnerq_events "
        "WHERE queue_name = %s ORDER BY id",
        [name],
    ):
        definition = events_schema["$defs"].get(event_type)
        assert definition is not None, f"event type {event_type!r} is not in events.schema.json"
        detail_value = json.loads(detail)
        Draft202012Validator(definition, format_checker=format_checker()).validate(detail_value)
        if "started_at" in detail:
            assert worker_id, f"{event_type} has started_at in its detail but no worker_id"


@pytest.fixture
def store(storage_db) -> StorageOperations:
    """The storage under contract (``StorageOperations``): built from the project's settings, as
    the default storage is. The tests call operations on it, so any storage that satisfies the
    protocol can be run through them."""
    from runnerq_django import conf
    from runnerq_django.storage import Storage

    return Storage(conf.storage_settings())
