"""Once the schema matches, ``migrate``, ``runnerq_schema migrate`` and the database system check
run no DDL and take no lock a busy queue would notice.

Another connection holds EXCLUSIVE locks on every RunnerQ table: that mode conflicts with every
lock except the ACCESS SHARE a plain SELECT (or a catalog deparse) takes, so any DDL, row lock or
write would wait; ``lock_timeout`` (through PGOPTIONS) turns such a wait into a prompt failure.
A control run shows the same setup does catch a migration that needs DDL.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import manage, manage_env
from tests.schema.support import TABLES, catalog_differences, clone_of, relation_fingerprint

pytestmark = pytest.mark.schema

LOCK_TIMEOUT_MS = 300
PROMPT_SECONDS = 15  # generous for a loaded machine; a blocked run fails at lock_timeout anyway


def _holding_exclusive_locks(url: str) -> psycopg.Connection:
    holder = psycopg.connect(url)
    holder.execute(f"LOCK TABLE {', '.join(TABLES)} IN EXCLUSIVE MODE")
    return holder


def _timed_manage(url: str, *args: str):
    env = manage_env(url, PGOPTIONS=f"-c lock_timeout={LOCK_TIMEOUT_MS}")
    started = time.monotonic()
    result = manage(*args, env=env, check=False)
    return result, time.monotonic() - started


def test_matching_schema_is_left_alone_under_exclusive_locks(migrated_templates):
    for label, server, template in migrated_templates:
        with clone_of(server, template) as url:
            # Django forgets it applied this app's migrations (as on a database another SDK set
            # up), so `migrate` really runs them: the migrator must find the catalog matching.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM django_migrations WHERE app = 'runnerq_django'")
            before = relation_fingerprint(url)
            holder = _holding_exclusive_locks(url)
            try:
                for args, expected in (
                    (("migrate", "--no-input"), "Applying runnerq_django.0001_initial... OK"),
                    (("runnerq_schema", "migrate"), "no DDL ran"),
                    (("runnerq_schema", "check"), "OK:"),
                    (("check", "--database", "default"), "no issues"),
                ):
                    result, seconds = _timed_manage(url, *args)
                    assert result.returncode == 0, f"{label} {args}:\n{result.stdout}\n{result.stderr}"
                    assert expected in result.stdout, f"{label} {args}:\n{result.stdout}"
                    assert seconds < PROMPT_SECONDS, f"{label} {args} took {seconds:.1f}s"
                # The holder's locks were never released or broken meanwhile.
                assert holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                    "AND mode = 'ExclusiveLock' AND granted AND locktype = 'relation'"
                ).fetchone()[0] == len(TABLES)
            finally:
                holder.close()
            assert relation_fingerprint(url) == before, label


def test_control_a_needed_migration_is_caught_by_the_same_setup(migrated_templates):
    _label, server, template = migrated_templates[0]
    with clone_of(server, template) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP INDEX idx_runnerq_processing")
        holder = _holding_exclusive_locks(url)
        try:
            result, _seconds = _timed_manage(url, "runnerq_schema", "migrate")
        finally:
            holder.close()
        assert result.returncode != 0, result.stdout
        assert "lock timeout" in result.stderr, result.stderr
        # Without the locks, the same command repairs it.
        manage("runnerq_schema", "migrate", db_url=url)
        assert catalog_differences(url) == []
