"""Operations on a database session (``storage.sql.session``): a transaction's statement
timeout, fleet-wide advisory locks, commit durability, the server's identity, table presence."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql as psycopg_sql

from runnerq_django.storage import db
from runnerq_django.storage.sql import session as q


def set_statement_timeout(alias: str, value: str) -> str:
    """Set the current transaction's ``statement_timeout``; returns the setting it replaced."""
    replaced: str = db.fetch_row(alias, q.SET_STATEMENT_TIMEOUT, [value])[0]
    return replaced


def restore_statement_timeout(alias: str, value: str) -> None:
    """Put back the setting :func:`set_statement_timeout` returned."""
    db.fetch_one(alias, q.RESTORE_STATEMENT_TIMEOUT, [value])


def try_advisory_lock(alias: str, key: int) -> bool:
    """Take the transaction-level advisory lock ``key`` unless another session holds it."""
    return bool(db.fetch_row(alias, q.TRY_ADVISORY_LOCK, [key])[0])


def relax_commit(alias: str) -> None:
    """This session's commits stop waiting for the WAL flush (see ``worker.db.relax_commit``)."""
    db.fetch_one(alias, q.RELAX_COMMIT)


def plan_generically(alias: str) -> None:
    """This session's prepared statements always run their generic plan (see
    ``worker.db.plan_claims_generically``)."""
    db.fetch_one(alias, q.FORCE_GENERIC_PLANS)


def turn_jit_off(alias: str) -> None:
    """This session's statements are never JIT-compiled (see ``worker.db.claim_without_jit``)."""
    db.fetch_one(alias, q.NO_JIT)


def jit_on(alias: str) -> bool:
    """Whether this session may JIT-compile its statements."""
    return bool(db.fetch_row(alias, q.JIT_ON)[0])


def server_and_schema(alias: str) -> tuple[str | None, str]:
    """The schema new tables go to (``None`` when the search path has none) and the server version."""
    return db.fetch_row(alias, q.SERVER_AND_SCHEMA)


def missing_tables(alias: str, names: list[str]) -> list[str]:
    """Which of the tables ``names`` the search path does not have."""
    return [row[0] for row in db.fetch_all(alias, q.MISSING_TABLES, [names])]


def listen(conn: psycopg.Connection[Any], channel: str) -> None:
    """``LISTEN`` on ``channel`` (quoted: a queue name may need it) on a connection of its own."""
    conn.execute(psycopg_sql.SQL(q.LISTEN).format(psycopg_sql.Identifier(channel)))
