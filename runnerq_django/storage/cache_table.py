"""Reads and writes of raw values in the table of Django's database cache, around the cache's
unpickling (``scheduler.cacheio`` keeps the scheduler's records there as JSON text)."""

from __future__ import annotations

from datetime import datetime

from django.db import connections, transaction

from runnerq_django.storage.sql import cache_table as q


def _names(alias: str, table: str) -> tuple[str, str, str, str]:
    quote = connections[alias].ops.quote_name
    return quote(table), quote("cache_key"), quote("value"), quote("expires")


def read_values(alias: str, table: str, keys: list[str], now: datetime) -> list[tuple[str, str]]:
    """(cache key, raw value) of the keys that hold an unexpired value at ``now``."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(
            q.read_values(*_names(alias, table), len(keys)),
            [*keys, connection.ops.adapt_datetimefield_value(now)],
        )
        rows: list[tuple[str, str]] = cursor.fetchall()
        return rows


def write_values(alias: str, table: str, rows: list[tuple[str, str, datetime]]) -> None:
    """Store (cache key, raw value, expiry) rows, in one transaction."""
    connection = connections[alias]
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.executemany(
            q.upsert_value(*_names(alias, table)),
            [(key, value, adapt(expires)) for key, value, expires in rows],
        )
