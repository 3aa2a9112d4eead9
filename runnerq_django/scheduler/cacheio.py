"""Reading and writing records in the scheduler's cache alias, telling an outage from a bad value.

- One ``get_many`` per tick over every declared key. ``get_many`` returns only the hits, so a
  key absent from the answer is a miss.
- A value that cannot be deserialized may fail the *whole batch* (django-redis and Django's
  database cache decode inside ``get_many``), so on any non-outage error the keys are read one by
  one and only the bad key is classified ``unreadable``.
- An outage (connection refused, timeout) is raised as :class:`CacheUnavailable`, never turned
  into misses: a miss triggers a repair, an outage triggers degraded mode.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any


class CacheUnavailable(Exception):
    """The cache could not be reached (as opposed to: it answered with a bad value)."""


class _Unreadable:
    """Marks a key whose stored value could not be decoded."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"<unreadable: {type(self.error).__name__}: {self.error}>"


@dataclass
class ReadResult:
    values: dict[str, Any]  # key -> decoded value, or an _Unreadable marker; absent = miss


def _outage_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, socket.timeout]
    try:
        import redis.exceptions

        types += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]
    except ImportError:  # pragma: no cover - django-redis is a dependency
        pass
    try:
        from django_redis.exceptions import ConnectionInterrupted

        types.append(ConnectionInterrupted)
    except ImportError:  # pragma: no cover
        pass
    from django.db import Error as DatabaseError

    types.append(DatabaseError)  # Django's database cache: down, or its table is missing
    return tuple(types)


def is_outage(error: BaseException) -> bool:
    return isinstance(error, _outage_types())


def is_unreadable(value: Any) -> bool:
    return isinstance(value, _Unreadable)


def unreadable_error(value: Any) -> BaseException:
    return value.error


def read_many(cache, keys: list[str]) -> ReadResult:
    if not keys:
        return ReadResult({})
    try:
        return ReadResult(dict(cache.get_many(keys)))
    except Exception as exc:
        if is_outage(exc):
            raise CacheUnavailable(str(exc) or type(exc).__name__) from exc
    # One bad value failed the batch: read key by key so only that key is unreadable.
    values: dict[str, Any] = {}
    missing = object()
    for key in keys:
        try:
            value = cache.get(key, missing)
        except Exception as exc:
            if is_outage(exc):
                raise CacheUnavailable(str(exc) or type(exc).__name__) from exc
            values[key] = _Unreadable(exc)
            continue
        if value is not missing:
            values[key] = value
    return ReadResult(values)


def write_many(cache, items: dict[str, tuple[dict, int]]) -> None:
    """``set_many`` grouped by TTL (one call for the usual case where all TTLs are equal)."""
    by_ttl: dict[int, dict[str, dict]] = {}
    for key, (value, ttl) in items.items():
        by_ttl.setdefault(ttl, {})[key] = value
    for ttl, batch in by_ttl.items():
        try:
            failed = cache.set_many(batch, timeout=ttl)
        except Exception as exc:
            if is_outage(exc):
                raise CacheUnavailable(str(exc) or type(exc).__name__) from exc
            raise
        if failed:  # memcached-style backends report keys they could not store
            raise RuntimeError(f"cache refused keys {sorted(failed)}")


def touch(cache, key: str, ttl: int) -> bool:
    try:
        return bool(cache.touch(key, ttl))
    except Exception as exc:
        if is_outage(exc):
            raise CacheUnavailable(str(exc) or type(exc).__name__) from exc
        raise
