"""The spec's migration procedure (SPEC.md section (a), "Migration procedure"), on a Django connection.

1. Compare the live catalog with ``catalog.json`` without taking locks; if it matches, run no DDL
   at all (even a no-op ``ALTER`` takes locks on a live queue).
2. Take the schema advisory lock with a polling ``pg_try_advisory_lock`` (never the blocking form:
   a blocked waiter holds a snapshot that ``CREATE INDEX CONCURRENTLY`` would wait on forever).
3. Check again: another process (Python, Go or TypeScript) may have finished meanwhile.
4. Run the baseline DDL in one transaction (tables, added columns, the retired payload moved to
   ``runnerq_inputs``, the migration-built indexes, ``fillfactor = 85``).
5. Build each concurrent index on its own outside a transaction: drop an invalid leftover, build,
   then drop the index it replaces.
6. Drop the retired indexes; release the lock even on failure.

The indexes are built from the declarations on the models, so the models are the one place that
names them.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

from django.db import transaction

from runnerq_django import schema, schema_ddl
from runnerq_django.spec.catalog import load

logger = logging.getLogger("runnerq_django.migrator")

SCHEMA_ADVISORY_LOCK_KEY = int(
    next(c["value"] for c in load("constants.json")["constants"] if c["name"] == "schema_advisory_lock_key")
)
LOCK_POLL_SECONDS = 0.2
DDL_ATTEMPTS = 5


def schema_problems(connection) -> list[str]:
    return schema.check_connection(connection, tolerate_retired_indexes=False)


def migrate_schema(connection, *, models=None, lock_timeout: float = 600.0) -> bool:
    """Bring the RunnerQ tables of ``connection`` to the spec's catalog. Returns whether DDL ran.

    ``connection`` must not be inside a transaction (concurrent index builds refuse to run in one).
    """
    if not schema_problems(connection):
        return False
    with schema_lock(connection, timeout=lock_timeout):
        problems = schema_problems(connection)
        if not problems:
            return False
        logger.info("runnerq.schema.migrating", extra={"problems": problems})
        models = models or _current_models()
        with connection.schema_editor(atomic=False, collect_sql=False) as editor:
            with transaction.atomic(using=connection.alias):
                with connection.cursor() as cursor:
                    cursor.execute(schema_ddl.TABLES)
                    cursor.execute(schema_ddl.ADDED_COLUMNS)
                    cursor.execute(schema_ddl.MOVE_RETIRED_PAYLOAD)
                    for model, index in _declared_indexes(models, concurrent=False):
                        cursor.execute(_if_not_exists(str(index.create_sql(model, editor))))
                    if not _has_fillfactor(cursor):
                        cursor.execute(schema_ddl.FILLFACTOR)
            for entry in load("concurrent_indexes.json")["indexes"]:
                model, index = _declared_index(models, entry["name"])
                _drop_if_invalid(connection, entry["name"])
                _execute_with_retry(connection, _if_not_exists(str(index.create_sql(model, editor, concurrently=True))))
                if entry.get("replaces"):
                    _execute_with_retry(connection, f'DROP INDEX IF EXISTS "{entry["replaces"]}"')
            for retired in load("retired.json")["indexes"]:
                _execute_with_retry(connection, f'DROP INDEX IF EXISTS "{retired["name"]}"')
    return True


@contextmanager
def schema_lock(connection, *, timeout: float):
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [SCHEMA_ADVISORY_LOCK_KEY])
            if cursor.fetchone()[0]:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"schema advisory lock {SCHEMA_ADVISORY_LOCK_KEY} not acquired in {timeout:.0f} s")
            time.sleep(LOCK_POLL_SECONDS)
    try:
        yield
    finally:
        if connection.in_atomic_block or connection.needs_rollback:
            connection.rollback()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SCHEMA_ADVISORY_LOCK_KEY])


_IS_INVALID = """
SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %s AND n.nspname = current_schema() AND NOT i.indisvalid
"""


def _drop_if_invalid(connection, name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_IS_INVALID, [name])
        invalid = cursor.fetchone() is not None
    if invalid:
        _execute_with_retry(connection, f'DROP INDEX IF EXISTS "{name}"')


def _execute_with_retry(connection, sql: str) -> None:
    """Schema statements may lose a deadlock against live traffic; they are idempotent, so retry."""
    from psycopg import errors

    for attempt in range(DDL_ATTEMPTS):
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
            return
        except Exception as exc:  # Django wraps psycopg errors; the cause tells the kind
            cause = exc.__cause__ or exc
            if attempt + 1 < DDL_ATTEMPTS and isinstance(cause, (errors.DeadlockDetected, errors.LockNotAvailable)):
                time.sleep(0.1 * (attempt + 1))
                continue
            raise


def _if_not_exists(sql: str) -> str:
    for prefix in ("CREATE INDEX CONCURRENTLY ", "CREATE INDEX "):
        if sql.startswith(prefix):
            return prefix + "IF NOT EXISTS " + sql[len(prefix):]
    raise ValueError(f"unexpected index DDL: {sql}")


def _has_fillfactor(cursor) -> bool:
    cursor.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'runnerq_activities'::regclass")
    return f"fillfactor={schema.FILLFACTOR}" in cursor.fetchone()[0]


def _current_models():
    from runnerq_django import models

    return [models.Activity, models.Input, models.Result, models.Event, models.Idempotency,
            models.Dependency, models.WorkerPool, models.Command]


def _declared_indexes(models, *, concurrent: bool):
    names = {entry["name"] for entry in load("concurrent_indexes.json")["indexes"]}
    for model in models:
        for index in model._meta.indexes:
            if (index.name in names) == concurrent:
                yield model, index


def _declared_index(models, name: str):
    for model in models:
        for index in model._meta.indexes:
            if index.name == name:
                return model, index
    raise LookupError(f"index {name} is not declared on the RunnerQ models")
