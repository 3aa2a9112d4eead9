"""Autovacuum settings per table for a queue's churn (issue 32).

A queue's tables don't grow like an application's: every claim, completion and retry leaves a
dead version of an activity row (and of its dequeue index entry), while completed rows are kept
for days. With the default ``autovacuum_vacuum_scale_factor`` of 0.2, a table of ten million
kept rows waits for two million dead ones before autovacuum comes, and every claim walks the dead
entries at the head of the dequeue index until it does. These settings make autovacuum come after
1% of the table (at least 1,000 rows) has died, without the cost-based pauses slowing it on the
activity table, and analyze it after 2% changed; the worker pools' rows (updated at every
heartbeat, a few rows) after 100 dead ones.

Only storage parameters (``reloptions``): no column, index or constraint of the spec's tables
changes, and the other SDKs neither read nor set them (``fillfactor = 85``, which every SDK's
migration sets, is kept). They take effect only where autovacuum runs (``autovacuum = on``, the
default), and they can't help while a transaction holds the xmin horizon: nothing that died after
its snapshot can be removed by anything until it ends (docs/how-to/production.md, "A transaction
left open"); they make autovacuum clean up soon after it does.
"""

from django.db import migrations

# table -> its storage parameters (inserted-row thresholds, PostgreSQL 13 and later, separately).
SETTINGS = {
    "runnerq_activities": {
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
        "autovacuum_vacuum_cost_delay": "0",
    },
    "runnerq_inputs": {"autovacuum_vacuum_scale_factor": "0.02", "autovacuum_vacuum_threshold": "1000"},
    "runnerq_results": {"autovacuum_vacuum_scale_factor": "0.02", "autovacuum_vacuum_threshold": "1000"},
    "runnerq_events": {"autovacuum_vacuum_scale_factor": "0.02", "autovacuum_vacuum_threshold": "1000"},
    "runnerq_worker_pools": {"autovacuum_vacuum_scale_factor": "0", "autovacuum_vacuum_threshold": "100"},
}
# Insert-driven vacuums (they set the visibility map, so index-only scans stay index-only).
INSERT_SETTINGS = {"runnerq_activities": {"autovacuum_vacuum_insert_scale_factor": "0.02"}}


def _when(condition: str, statement: str) -> str:
    """``statement`` run only when ``condition`` holds: read from the catalogue, which takes no
    lock on the table, so a database that already has the settings (migrated by another SDK's
    tooling, or this app's migrations forgotten and replayed) sees no DDL and waits for nothing."""
    return f"DO $$ BEGIN IF {condition} THEN EXECUTE '{statement}'; END IF; END $$"


def _missing(table: str, options: dict[str, str]) -> str:
    wanted = ", ".join(f"'{k}={v}'" for k, v in options.items())
    return f"NOT (SELECT coalesce(reloptions, '{{}}') @> ARRAY[{wanted}] FROM pg_class WHERE oid = '{table}'::regclass)"


def _set(table: str, options: dict[str, str]) -> str:
    return f"ALTER TABLE {table} SET ({', '.join(f'{k} = {v}' for k, v in options.items())})"


def _reset(table: str, options: dict[str, str]) -> str:
    return f"ALTER TABLE {table} RESET ({', '.join(options)})"


ON_13 = "current_setting('server_version_num')::int >= 130000"  # insert thresholds are new in 13


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0009_forks"),
    ]

    operations = [
        *(
            migrations.RunSQL(_when(_missing(t, o), _set(t, o)), _reset(t, o), elidable=False)
            for t, o in SETTINGS.items()
        ),
        *(
            migrations.RunSQL(
                _when(f"{ON_13} AND {_missing(t, o)}", _set(t, o)), _when(ON_13, _reset(t, o)), elidable=False
            )
            for t, o in INSERT_SETTINGS.items()
        ),
    ]
