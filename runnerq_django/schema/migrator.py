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
6. Drop the retired indexes; release the lock even on failure or cancellation.

The indexes are built from their declarations on the models (``Meta.indexes``: partial
conditions, ``COALESCE`` expressions, ``DESC`` keys, the spec's names), so the models are the one
place that defines them; which of them are built concurrently, and what each replaces, comes from
the spec's ``concurrent_indexes.json``. ``tests/schema/test_models_agree.py`` proves that the
declarations render exactly the spec's definitions.

Internal: not part of the public API.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import transaction

from runnerq_django.logs import log_event
from runnerq_django.schema import compare as schema
from runnerq_django.schema import ddl as schema_ddl
from runnerq_django.spec.catalog import load
from runnerq_django.spec.constants import SCHEMA_ADVISORY_LOCK_KEY

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper
    from django.db.models import Index, Model

logger = logging.getLogger("runnerq_django.schema.migrator")

LOCK_POLL_SECONDS = 0.2
DDL_ATTEMPTS = 5


def schema_differences(connection: BaseDatabaseWrapper) -> list[schema.Difference]:
    return schema.check_connection(connection)


def migrate_schema(connection: BaseDatabaseWrapper, *, lock_timeout: float = 600.0) -> bool:
    """Bring the RunnerQ tables of ``connection`` to the spec's catalog. Returns whether DDL ran.

    ``connection`` must be in autocommit (not inside ``atomic()``): concurrent index builds refuse
    to run in a transaction. Raises ``schema.SchemaMismatch`` when the procedure ran but the
    database still differs (something the spec's idempotent DDL does not repair).
    """
    if connection.in_atomic_block:
        raise RuntimeError(
            "migrate_schema needs a connection outside atomic(): CREATE INDEX CONCURRENTLY cannot run in a transaction"
        )
    if not schema_differences(connection):
        return False
    with schema_lock(connection, timeout=lock_timeout):
        differences = schema_differences(connection)
        if not differences:
            return False
        log_event(
            logger,
            logging.INFO,
            "runnerq.schema.migrating",
            "Migrating the RunnerQ schema: %(differences)s",
            differences=[str(d) for d in differences],
        )
        _with_retry(functools.partial(_run_baseline, connection))
        for entry in load("schema/postgres/concurrent_indexes.json")["indexes"]:
            _with_retry(functools.partial(_build_concurrently, connection, entry))
            if entry.get("replaces"):
                _with_retry(functools.partial(_drop_index, connection, entry["replaces"]))
        for retired in load("schema/postgres/retired.json")["indexes"]:
            _with_retry(functools.partial(_drop_index, connection, retired["name"]))
        remaining = schema_differences(connection)
        if remaining:
            raise schema.SchemaMismatch(remaining)
        log_event(logger, logging.INFO, "runnerq.schema.migrated", "The RunnerQ schema is up to date.")
    return True


@contextmanager
def schema_lock(connection: BaseDatabaseWrapper, *, timeout: float) -> Iterator[None]:
    """Hold the spec's schema advisory lock (session level) for the duration of the block."""
    _poll_for_lock(connection, "pg_try_advisory_lock", timeout)
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [SCHEMA_ADVISORY_LOCK_KEY])
        except Exception:
            # A dead connection has released its session lock already; don't hide the real error.
            log_event(
                logger,
                logging.WARNING,
                "runnerq.schema.unlock_failed",
                "Could not release the schema advisory lock (a closed session has released it).",
                exc_info=True,
            )


def hold_schema_lock_until_commit(connection: BaseDatabaseWrapper, *, timeout: float = 600.0) -> None:
    """Take the schema advisory lock for the rest of the current transaction (polling, never the
    blocking form). For migrations that create tables in a transaction: a session lock released
    before commit would let the next process miss the uncommitted tables and fail creating them."""
    if not connection.in_atomic_block:
        raise RuntimeError("hold_schema_lock_until_commit needs a transaction")
    _poll_for_lock(connection, "pg_try_advisory_xact_lock", timeout)


def _poll_for_lock(connection: BaseDatabaseWrapper, try_function: str, timeout: float) -> None:
    """Poll ``try_function`` for the schema lock: the blocking form would hold a snapshot that
    another process's ``CREATE INDEX CONCURRENTLY`` waits on, a deadlock."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute(f"SELECT {try_function}(%s)", [SCHEMA_ADVISORY_LOCK_KEY])
            if cursor.fetchone()[0]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"schema advisory lock {SCHEMA_ADVISORY_LOCK_KEY} not acquired in {timeout:.0f} s"
                )
            time.sleep(LOCK_POLL_SECONDS)


def _run_baseline(connection: BaseDatabaseWrapper) -> None:
    """Step 4: the spec's re-runnable baseline, all or nothing."""
    concurrent = {entry["name"] for entry in load("schema/postgres/concurrent_indexes.json")["indexes"]}
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(schema_ddl.TABLES)
        cursor.execute(schema_ddl.ADDED_COLUMNS)
        cursor.execute(schema_ddl.MOVE_RETIRED_PAYLOAD)
        for model, index in declared_indexes():
            if index.name in concurrent:
                continue
            if _is_invalid(cursor, index.name):
                cursor.execute(f'DROP INDEX "{index.name}"')
            cursor.execute(_if_not_exists(_index_sql(connection, model, index, concurrently=False)))
        cursor.execute(schema_ddl.FILLFACTOR_IS_SET)
        if not cursor.fetchone()[0]:
            cursor.execute(schema_ddl.FILLFACTOR)


def _build_concurrently(connection: BaseDatabaseWrapper, entry: dict[str, Any]) -> None:
    """Step 5 for one index: an invalid leftover is dropped first, or IF NOT EXISTS would keep it."""
    model, index = next((m, i) for m, i in declared_indexes() if i.name == entry["name"])
    with connection.cursor() as cursor:
        if _is_invalid(cursor, entry["name"]):
            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{entry["name"]}"')
        cursor.execute(_if_not_exists(_index_sql(connection, model, index, concurrently=True)))


def _drop_index(connection: BaseDatabaseWrapper, name: str) -> None:
    # CONCURRENTLY: a plain DROP INDEX queues for an ACCESS EXCLUSIVE lock and stalls a busy queue.
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def _with_retry(step: Callable[[], object]) -> None:
    """Schema statements may lose a deadlock (or a lock_timeout) against live traffic; every step
    is idempotent, so run it again."""
    from psycopg import errors

    for attempt in range(DDL_ATTEMPTS):
        try:
            step()
            return
        except Exception as exc:  # Django wraps psycopg errors; the cause tells the kind
            cause = exc.__cause__ or exc
            retryable = isinstance(cause, (errors.DeadlockDetected, errors.LockNotAvailable))
            if not retryable or attempt + 1 == DDL_ATTEMPTS:
                raise
            log_event(
                logger,
                logging.WARNING,
                "runnerq.schema.retrying_ddl",
                "A schema change hit a lock conflict (try %(attempt)s; retrying): %(error)s",
                attempt=attempt + 1,
                error=str(cause),
            )
            time.sleep(0.1 * (attempt + 1))


_IS_INVALID = """
SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %s AND n.nspname = current_schema() AND NOT i.indisvalid
"""


def _is_invalid(cursor: CursorWrapper, name: str) -> bool:
    cursor.execute(_IS_INVALID, [name])
    return cursor.fetchone() is not None


def declared_indexes() -> Iterator[tuple[type[Model], Index]]:
    """``(model, index)`` for every index declared on the RunnerQ spec models."""
    from runnerq_django import models

    for model in (
        models.Activity,
        models.Input,
        models.Result,
        models.Event,
        models.Idempotency,
        models.Dependency,
        models.WorkerPool,
        models.Command,
    ):
        for index in model._meta.indexes:
            yield model, index


def _index_sql(
    connection: BaseDatabaseWrapper, model: type[Model], index: Index, *, concurrently: bool
) -> str:
    return str(index.create_sql(model, connection.schema_editor(), concurrently=concurrently))


def _if_not_exists(sql: str) -> str:
    for prefix in ("CREATE INDEX CONCURRENTLY ", "CREATE INDEX "):
        if sql.startswith(prefix) and not sql.startswith(prefix + "IF NOT EXISTS "):
            return prefix + "IF NOT EXISTS " + sql[len(prefix) :]
    raise ValueError(f"unexpected index DDL: {sql}")
