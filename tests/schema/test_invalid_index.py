"""An index left INVALID by an interrupted concurrent build is dropped and rebuilt by ``migrate``
(``CREATE INDEX ... IF NOT EXISTS`` alone would keep the broken one forever)."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import manage, scratch_database
from tests.schema.support import catalog_differences, run_sql_file

pytestmark = pytest.mark.schema

INDEX_STATE = """
SELECT c.oid::int8, i.indisvalid, pg_get_indexdef(c.oid)
FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relname = %s
"""


def _state(url: str, name: str):
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(INDEX_STATE, [name]).fetchone()


def _leave_failed_concurrent_build(url: str) -> None:
    """A real interrupted build: CREATE UNIQUE INDEX CONCURRENTLY that hits duplicates leaves an
    INVALID index of that name behind (with, here, a definition the catalog does not have)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP INDEX idx_runnerq_query_created")
        conn.execute(
            "INSERT INTO runnerq_activities (id, queue_name, activity_type) "
            "VALUES (gen_random_uuid(), 'dup', 'T'), (gen_random_uuid(), 'dup', 'T')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY idx_runnerq_query_created ON runnerq_activities (queue_name)"
            )


def _mark_invalid(url: str, name: str) -> None:
    """What a build killed midway leaves for a migration-built index (needs a superuser)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", [name])


def test_migrate_drops_and_rebuilds_invalid_leftovers(pg_servers):
    for label, server in pg_servers:
        with scratch_database(server) as url:
            run_sql_file(url, "spec_ddl.sql")
            _leave_failed_concurrent_build(url)
            _mark_invalid(url, "idx_runnerq_events_queue_seq")
            leftover_oid, valid, definition = _state(url, "idx_runnerq_query_created")
            assert not valid and "UNIQUE" in definition, label
            events_oid, valid, _ = _state(url, "idx_runnerq_events_queue_seq")
            assert not valid, label
            problems = catalog_differences(url)
            assert "idx_runnerq_query_created: invalid" in problems, problems
            assert "idx_runnerq_events_queue_seq: invalid" in problems, problems

            manage("migrate", "--no-input", db_url=url)

            for name, old_oid in (
                ("idx_runnerq_query_created", leftover_oid),
                ("idx_runnerq_events_queue_seq", events_oid),
            ):
                oid, valid, _definition = _state(url, name)
                assert valid and oid != old_oid, f"{label}: {name} was not rebuilt"
            assert catalog_differences(url) == [], label
            with psycopg.connect(url) as conn:
                assert (
                    conn.execute(
                        "SELECT count(*) FROM runnerq_activities WHERE queue_name = 'dup'"
                    ).fetchone()[0]
                    == 2
                )
