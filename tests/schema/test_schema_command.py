"""``runnerq_schema check`` (and the ``check --database`` system check) on a good and a damaged
database; ``runnerq_schema migrate`` repairs what the spec's migration repairs and names the rest."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.helpers import manage
from tests.schema.support import catalog_differences, clone_of, retired_objects

pytestmark = pytest.mark.schema

DAMAGE = [
    "DROP INDEX idx_runnerq_processing",
    "ALTER TABLE runnerq_activities ALTER COLUMN priority SET DEFAULT 2",
    "ALTER TABLE runnerq_activities ADD COLUMN payload jsonb",
    "CREATE INDEX idx_runnerq_dead_letter ON runnerq_activities (queue_name) WHERE status = 'dead_letter'",
    "ALTER TABLE runnerq_activities RESET (fillfactor)",
]

EXPECTED_LINES = [
    "index idx_runnerq_processing: missing (on runnerq_activities)",
    "column runnerq_activities.priority: default 2, want 1",
    "column runnerq_activities.payload: retired but still present",
    "index idx_runnerq_dead_letter: retired but still present",
    "table runnerq_activities: fillfactor is not 85",
]


def test_check_on_a_good_and_a_damaged_database(migrated_templates):
    for label, server, template in migrated_templates:
        with clone_of(server, template) as url:
            good = manage("runnerq_schema", "check", db_url=url)
            assert "OK: 8 tables and 14 indexes match" in good.stdout, label
            assert json.loads(manage("runnerq_schema", "check", "--json", db_url=url).stdout)["ok"] is True

            with psycopg.connect(url, autocommit=True) as conn:
                for statement in DAMAGE:
                    conn.execute(statement)

            bad = manage("runnerq_schema", "check", db_url=url, check=False)
            assert bad.returncode == 1, label
            report = bad.stdout.splitlines()
            for expected in EXPECTED_LINES:
                assert sum(line.strip().startswith(expected) for line in report) == 1, (
                    f"{expected!r} in\n{bad.stdout}"
                )
            assert len(report) == 1 + len(EXPECTED_LINES), bad.stdout  # a heading, then one line each
            assert "5 differences (1 tolerable" in bad.stderr, bad.stderr

            as_json = manage("runnerq_schema", "check", "--json", db_url=url, check=False)
            assert as_json.returncode == 1
            report = json.loads(as_json.stdout)
            assert report["ok"] is False and len(report["differences"]) == 5
            assert {d["subject"] for d in report["differences"] if d["tolerable"]} == {
                "index idx_runnerq_dead_letter"
            }

            system = manage("check", "--database", "default", db_url=url, check=False)
            assert system.returncode != 0, label
            assert (
                system.stderr.count("(runnerq.E010)") == 4 and system.stderr.count("(runnerq.W010)") == 1
            ), system.stderr
            # Without --database, Django runs no database-tagged check.
            assert manage("check", db_url=url).returncode == 0

            repair = manage("runnerq_schema", "migrate", db_url=url, check=False)
            # The procedure rebuilt the index, moved the payload column away, dropped the retired
            # index and set fillfactor; it does not rewrite an existing column's default.
            assert repair.returncode == 1, repair.stdout
            assert "column runnerq_activities.priority: default 2, want 1" in repair.stderr, repair.stderr
            assert retired_objects(url) == [], label
            assert catalog_differences(url) == ["runnerq_activities.priority: default '2' != '1'"], label


def test_check_of_an_empty_database(pg_servers):
    from tests.helpers import scratch_database

    _label, server = pg_servers[0]
    with scratch_database(server) as url:
        result = manage("runnerq_schema", "check", db_url=url, check=False)
        assert result.returncode == 1
        assert "table runnerq_activities: missing" in result.stdout
        # One line per missing table, not one more per index of a missing table.
        assert "index " not in result.stdout
        # A fresh database is not a system-check error: `migrate` runs these checks before migrating.
        assert manage("check", "--database", "default", db_url=url).returncode == 0
