"""The flush after a transactional test (tests/flush.py) empties every table as Django's TRUNCATE
did, and still truncates a table that held many rows."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from tests.flush import TRUNCATE_ABOVE_ROWS


def _filenode(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relfilenode FROM pg_class WHERE oid = %s::regclass", [table])
        return cursor.fetchone()[0]


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_flush_empties_every_table_and_truncates_the_bulky_ones():
    from django.contrib.auth.models import User
    from django.contrib.contenttypes.models import ContentType

    user = User.objects.create(username="flushed")
    user.user_permissions.add(*ContentType.objects.get(model="user").permission_set.all())
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runnerq_activities (id, queue_name, activity_type, status) "
            "SELECT gen_random_uuid(), 'flushed', 't', 'pending' FROM generate_series(1, %s)",
            [TRUNCATE_ABOVE_ROWS + 1],
        )
        cursor.execute(
            "INSERT INTO runnerq_events (activity_id, queue_name, event_type, detail) "
            "VALUES (gen_random_uuid(), 'flushed', 'Enqueued', '{}')"
        )
    bulky, small = _filenode("runnerq_activities"), _filenode("runnerq_events")

    # As pytest-django's TransactionTestCase teardown calls it (``flush`` resets sequences unless told).
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)

    for table in ("runnerq_activities", "runnerq_events", "auth_user", "auth_user_user_permissions"):
        assert _count(table) == 0, table
    assert _filenode("runnerq_activities") != bulky  # truncated: a new, empty file
    assert _filenode("runnerq_events") == small  # deleted from
    # The post_migrate signal put the content types and permissions back, as after a TRUNCATE.
    assert ContentType.objects.filter(model="user").exists()


@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_a_flush_resetting_sequences_is_left_to_django():
    from django.contrib.auth.models import User

    User.objects.create(username="first")
    call_command("flush", verbosity=0, interactive=False, reset_sequences=True)
    assert User.objects.create(username="again").pk == 1
