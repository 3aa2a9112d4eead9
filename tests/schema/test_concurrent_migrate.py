"""Two ``migrate`` processes started together on a fresh database: the spec's advisory lock lets
one build the schema while the other waits, re-checks and finds nothing to do.

They apply every migration of this app: ``0001_initial`` (the RunnerQ schema, under the spec's
session lock) and ``0002_scheduler`` (the scheduler's tables, created if missing under the same
lock held to commit), so both processes finish and neither fails on "already exists".
"""

from __future__ import annotations

import psycopg
import pytest

from runnerq_django.spec.constants import SCHEMA_ADVISORY_LOCK_KEY
from tests.helpers import manage, scratch_database, spawn_manage, stop_process, wait_until
from tests.schema.support import catalog_differences, fillfactor, retired_objects

pytestmark = [pytest.mark.schema, pytest.mark.slow]

# Django's own tables and every app's content types and permissions, made in one process first.
# Django's post_migrate handlers create content types and permissions with a read-then-insert
# that is not safe when two `migrate` processes reach it at once (a unique violation in one):
# that race is Django's (docs/explanation/schema.md). This test is about RunnerQ's part.
PREPARE = """
from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.core.management import call_command
for label in ("contenttypes", "auth", "admin", "sessions"):
    call_command("migrate", label, verbosity=0)
for config in apps.get_app_configs():
    create_contenttypes(config, verbosity=0)
    create_permissions(config, verbosity=0)
"""

MIGRATOR_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%%pg_try_advisory_lock%%'
"""


def test_two_migrate_processes_started_together(pg_servers):
    for label, server in pg_servers:
        with scratch_database(server) as url:
            manage("shell", "-c", PREPARE, db_url=url)
            with psycopg.connect(url, autocommit=True) as gate:
                # Hold the schema lock so that both processes are provably past their lock-free
                # check and polling for the lock before either may start; then open the gate.
                gate.execute("SELECT pg_advisory_lock(%s)", [SCHEMA_ADVISORY_LOCK_KEY])
                processes = [
                    spawn_manage("migrate", "runnerq_django", "--no-input", db_url=url) for _ in range(2)
                ]
                try:
                    wait_until(
                        lambda: gate.execute(MIGRATOR_WAITING).fetchone()[0] == 2,
                        timeout=60,
                        message="both migrate processes polling the schema advisory lock",
                    )
                finally:
                    gate.execute("SELECT pg_advisory_unlock(%s)", [SCHEMA_ADVISORY_LOCK_KEY])
            outputs = [proc.communicate(timeout=120)[0] for proc in processes]
            codes = [proc.returncode for proc in processes]
            for proc in processes:
                stop_process(proc)

            assert codes == [0, 0], f"{label}:\n" + "\n----\n".join(outputs)
            for out in outputs:
                assert "Applying runnerq_django.0001_initial..." in out, f"{label}:\n{out}"
                assert "Applying runnerq_django.0002_scheduler... OK" in out, f"{label}:\n{out}"
            # Exactly one of them ran DDL; the other re-checked under the lock and found it done.
            assert sum(out.count("Migrating the RunnerQ schema") for out in outputs) == 1, outputs
            assert catalog_differences(url) == [], label
            assert retired_objects(url) == [] and fillfactor(url) == "85", label
            with psycopg.connect(url) as conn:
                tables = {
                    row[0]
                    for row in conn.execute(
                        "SELECT tablename FROM pg_tables"
                        " WHERE tablename LIKE 'runnerq_periodic%%' OR tablename LIKE 'runnerq_console%%'"
                    )
                }
            assert tables == {
                "runnerq_periodic_lease",
                "runnerq_periodic_occurrences",
                "runnerq_periodic_repairs",
                "runnerq_console_minutes",
                "runnerq_console_depth",
            }, label
