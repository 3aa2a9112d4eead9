"""``migrate`` over databases that other RunnerQ SDKs set up: the current spec DDL (nothing to do,
nothing touched but the autovacuum storage parameters of 0010_vacuum_settings) and an older layout (the retired payload column and retired indexes)."""

from __future__ import annotations

import importlib
import json
import uuid

import psycopg
import pytest

from tests.helpers import manage, scratch_database
from tests.schema.support import (
    catalog_differences,
    fillfactor,
    relation_fingerprint,
    retired_objects,
    run_sql_file,
)

pytestmark = pytest.mark.schema

# table -> the autovacuum storage parameters migration 0010 sets on it.
VACUUM_SETTINGS = importlib.import_module("runnerq_django.migrations.0010_vacuum_settings").SETTINGS


def reloptions(url: str, table: str) -> list[str]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table]).fetchone()
    return list(row[0] or [])


ROOT, CHILD = uuid.UUID(int=1), uuid.UUID(int=2)


def _insert_lean_rows(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO runnerq_activities (id, queue_name, activity_type, status, root_activity_id) "
            "VALUES (%s, 'q', 'Charge', 'completed', %s)",
            [ROOT, ROOT],
        )
        conn.execute(
            "INSERT INTO runnerq_activities (id, queue_name, activity_type, parent_activity_id, root_activity_id, depth) "
            "VALUES (%s, 'q', 'Refund', %s, %s, 1)",
            [CHILD, ROOT, ROOT],
        )
        conn.execute(
            "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) VALUES (%s, 'q', '{\"amount\": 5}'), "
            "(%s, 'q', 'null')",
            [ROOT, CHILD],
        )
        conn.execute(
            "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id) "
            "VALUES (%s, 'q', 'Ok', '42', %s)",
            [ROOT, ROOT],
        )
        conn.execute(
            "INSERT INTO runnerq_events (activity_id, queue_name, event_type, detail) "
            "VALUES (%s, 'q', 'RunNow', '{\"command_id\": \"\"}')",
            [CHILD],
        )
        conn.execute(
            "INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id) VALUES ('q', 'k', %s)",
            [ROOT],
        )
        conn.execute(
            "INSERT INTO runnerq_dependencies (queue_name, waiter_activity_id, result_id, producer_activity_id) "
            "VALUES ('q', %s, %s, %s)",
            [ROOT, CHILD, CHILD],
        )


def _snapshot(url: str) -> dict[str, list]:
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(f"SELECT to_jsonb(t) FROM {table} t ORDER BY 1::text").fetchall()
            for table in (
                "runnerq_activities",
                "runnerq_inputs",
                "runnerq_results",
                "runnerq_events",
                "runnerq_idempotency",
                "runnerq_dependencies",
            )
        }


def test_migrate_over_the_spec_ddl_changes_nothing(pg_servers):
    for label, server in pg_servers:
        with scratch_database(server) as url:
            run_sql_file(url, "spec_ddl.sql")
            # The fixture is faithful to the spec: the independent comparison finds nothing.
            assert catalog_differences(url) == [], label
            _insert_lean_rows(url)
            rows, relations = _snapshot(url), relation_fingerprint(url)

            out = manage("migrate", "--no-input", db_url=url).stdout

            assert "Applying runnerq_django.0001_initial... OK" in out, label
            assert _snapshot(url) == rows, label
            assert sum(len(v) for v in rows.values()) == 8, label
            # No DDL touched a table another SDK created but 0010_vacuum_settings' storage
            # parameters (ALTER TABLE ... SET (autovacuum_...): no rewrite, no index, a lock
            # that lets reads and writes through): the tables and indexes keep their files, the
            # indexes their catalogue rows, and nothing else changed in the tables' rows.
            after = relation_fingerprint(url)
            assert {name: value[:2] for name, value in after.items()} == {
                name: value[:2] for name, value in relations.items()
            }, label
            changed = {name for name in after if after[name] != relations[name]}
            assert changed <= set(VACUUM_SETTINGS), label
            for table, options in VACUUM_SETTINGS.items():
                assert {f"{k}={v}" for k, v in options.items()} <= set(reloptions(url, table)), label
            assert catalog_differences(url) == [] and fillfactor(url) == "85", label


PAYLOADS = {
    uuid.UUID(int=10): {"order": 42, "items": ["a", "b"]},
    uuid.UUID(int=11): "plain string",
    uuid.UUID(int=12): None,  # an absent payload becomes JSON null in runnerq_inputs
}


def test_migrate_moves_the_retired_payload_and_drops_retired_indexes(pg_servers):
    for label, server in pg_servers:
        with scratch_database(server) as url:
            run_sql_file(url, "older_layout.sql")
            with psycopg.connect(url) as conn:
                for activity_id, payload in PAYLOADS.items():
                    conn.execute(
                        "INSERT INTO runnerq_activities (id, queue_name, activity_type, payload, status, retry_count) "
                        "VALUES (%s, 'old_q', 'Legacy', %s, 'retrying', 2)",
                        [activity_id, None if payload is None else json.dumps(payload)],
                    )
            assert "runnerq_activities.payload" in retired_objects(url), label

            manage("migrate", "--no-input", db_url=url)

            with psycopg.connect(url) as conn:
                inputs = {
                    row[0]: row[1:]
                    for row in conn.execute(
                        "SELECT activity_id, queue_name, payload, jsonb_typeof(payload), serialization FROM runnerq_inputs"
                    )
                }
                kept = conn.execute(
                    "SELECT count(*), min(status), min(retry_count), min(depth), min(max_retry_delay_seconds) "
                    "FROM runnerq_activities"
                ).fetchone()
            assert set(inputs) == set(PAYLOADS), label
            for activity_id, payload in PAYLOADS.items():
                queue, stored, json_type, serialization = inputs[activity_id]
                assert (queue, stored, serialization) == ("old_q", payload, "json-v1"), label
                assert json_type == ("null" if payload is None else json_type), label
            assert inputs[uuid.UUID(int=12)][2] == "null", "absent payload must be JSON null, not SQL NULL"
            assert kept == (3, "retrying", 2, 0, 0), label
            assert retired_objects(url) == [], label
            assert catalog_differences(url) == [], label
            assert fillfactor(url) == "85", label
