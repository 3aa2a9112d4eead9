"""``migrate`` on an empty database produces exactly the spec's catalog, on every server."""

import psycopg
import pytest

from runnerq_django.schema.compare import check_connection
from tests.helpers import manage, scratch_database
from tests.schema.support import catalog_differences, fillfactor, retired_objects


@pytest.mark.django_db
def test_test_database_matches_the_catalog():
    from django.db import connection

    assert check_connection(connection) == []


@pytest.mark.schema
def test_fresh_migrate_produces_the_catalog_on_every_server(pg_servers):
    for label, server in pg_servers:
        with scratch_database(server) as url:
            out = manage("migrate", "--no-input", db_url=url).stdout
            assert "Applying runnerq_django.0001_initial... OK" in out, label
            assert catalog_differences(url) == [], label
            assert fillfactor(url) == "85", label
            assert retired_objects(url) == [], label
            with psycopg.connect(url) as conn:
                applied = conn.execute(
                    "SELECT name FROM django_migrations WHERE app = 'runnerq_django'"
                ).fetchall()
            assert ("0001_initial",) in applied, label


@pytest.mark.schema
def test_the_independent_comparison_sees_a_difference(migrated_templates):
    """Guard against a comparison that passes vacuously: one changed default must show."""
    from tests.schema.support import clone_of

    _label, server, template = migrated_templates[0]
    with clone_of(server, template) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE runnerq_inputs ALTER COLUMN serialization SET DEFAULT 'superjson-v1'")
            conn.execute("CREATE INDEX idx_runnerq_extra ON runnerq_events (worker_id)")
        problems = catalog_differences(url)
    assert any("runnerq_inputs.serialization: default" in p for p in problems), problems
    assert any("idx_runnerq_extra" in p for p in problems), problems
