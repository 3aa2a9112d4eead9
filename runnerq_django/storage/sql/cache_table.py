"""The statements on the table of Django's database cache (the scheduler's records, stored as
JSON text in its ``value`` column so they are never unpickled), by name. The table and column
names come quoted by the connection (``connection.ops.quote_name``); values are bound (``%s``).
"""

from __future__ import annotations


def read_values(table: str, key: str, value: str, expires: str, count: int) -> str:
    """The unexpired values of ``count`` cache keys: (cache_key, value) per key present."""
    return (
        f"SELECT {key}, {value} FROM {table} WHERE {key} IN ({', '.join(['%s'] * count)}) AND {expires} > %s"
    )


def upsert_value(table: str, key: str, value: str, expires: str) -> str:
    """Write one key's value and expiry, replacing what it held (PostgreSQL or SQLite)."""
    return (
        f"INSERT INTO {table} ({key}, {value}, {expires}) "
        f"VALUES (%s, %s, %s) ON CONFLICT ({key}) DO UPDATE "
        f"SET {value} = EXCLUDED.{value}, {expires} = EXCLUDED.{expires}"
    )
