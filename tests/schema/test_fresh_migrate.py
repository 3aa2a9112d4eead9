import pytest

from runnerq_django.schema import check_connection
from tests.helpers import manage, scratch_database


@pytest.mark.django_db
def test_test_database_matches_the_catalog():
    from django.db import connection

    assert check_connection(connection) == []


@pytest.mark.schema
def test_fresh_migrate_on_every_server(pg_servers):
    import psycopg

    for label, server in pg_servers:
        with scratch_database(server) as url:
            manage("migrate", "--no-input", db_url=url)
            with psycopg.connect(url) as conn:
                rows = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'runnerq_activities'").fetchone()
                assert "fillfactor=85" in rows[0], label
