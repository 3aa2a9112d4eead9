"""The scheduler's records in its cache alias: JSON text, read raw, never unpickled.

Django's Redis, database, file-based and memcached caches and django-redis (with its default
serializer) unpickle what they read, so ``cache.get`` would let anyone who can write one key run
code in the scheduler, in ``runnerq_schedule`` and in the web process showing the admin's
scheduler page. So the records are stored as JSON text and read around the backend's
deserializer, whatever serializer the alias is configured with:

- django-redis (``DefaultClient`` and its Sentinel and Herd subclasses) and Django's
  ``RedisCache``: the redis-py client (``MGET``, ``SET ... EX``, ``EXPIRE``) on the backend's keys;
- Django's ``DatabaseCache``: its table, through ``storage.cache_table``, whose ``value`` column
  then holds the JSON text;
- ``LocMemCache``/``DummyCache``: the cache API (process-local: only values this process wrote
  are ever unpickled);
- any other backend is refused (:class:`CacheMisconfigured`, system check ``runnerq.E104``).

Misses, bad values and outages are told apart: a key absent from a read is a miss (a repair);
a value that is not JSON is that key's ``unreadable`` marker (a repair of that key only); an
outage (connection refused, timeout) is :class:`CacheUnavailable` (degraded mode), never misses.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.core.cache.backends.base import BaseCache
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.core.cache.backends.db import DatabaseCache
    from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
    from redis import Redis

P = ParamSpec("P")
T = TypeVar("T")
# ``{key: (JSON text, ttl seconds)}``, what a store's ``_write`` is given.
Texts = dict[str, tuple[str, int]]

# A record is a few hundred bytes; a bigger value is not parsed at all (the admin reads them too).
MAX_RECORD_BYTES = 64 * 1024
REDIS_EXTRA = 'pip install "runnerq-django[redis]"'


class CacheUnavailable(Exception):
    """The cache could not be reached (as opposed to: it answered with a bad value)."""


class CacheMisconfigured(ImproperlyConfigured):
    """The scheduler's cache alias can't be used; ``check_id`` is the system check reporting it."""

    def __init__(self, check_id: str, message: str, hint: str):
        super().__init__(f"{message} ({hint})")
        self.check_id, self.message, self.hint = check_id, message, hint


class _Unreadable:
    """Marks a key whose stored value could not be decoded."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"<unreadable: {type(self.error).__name__}: {self.error}>"


def is_unreadable(value: Any) -> bool:
    return isinstance(value, _Unreadable)


def unreadable_error(value: Any) -> BaseException:
    if not isinstance(value, _Unreadable):
        raise TypeError(f"not an unreadable marker: {value!r}")
    return value.error


def decode_text(raw: Any) -> Any:
    """The JSON value of a stored text, or an unreadable marker (never anything else)."""
    if not isinstance(raw, (bytes, str)):
        return _Unreadable(TypeError(f"not JSON text but a {type(raw).__name__}"))
    if len(raw) > MAX_RECORD_BYTES:
        return _Unreadable(ValueError(f"{len(raw)} bytes, over the {MAX_RECORD_BYTES} a record may take"))
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return _Unreadable(exc)


def encode_text(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _outage_types() -> tuple[type[BaseException], ...]:
    from django.db import Error as DatabaseError

    # DatabaseError: Django's database cache is down, or its table is missing. redis-py's errors
    # only when it is loaded (no Redis backend, no redis errors; and no import of an extra).
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, socket.timeout, DatabaseError]
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        types += [redis_errors.ConnectionError, redis_errors.TimeoutError]
    return tuple(types)


def is_outage(error: BaseException) -> bool:
    return isinstance(error, _outage_types())


class RecordStore:
    """Reads and writes records (JSON objects) by key; outages raise :class:`CacheUnavailable`."""

    def __init__(self, cache: BaseCache):
        self.cache = cache

    def read_many(self, keys: list[str]) -> dict[str, Any]:
        """key -> decoded JSON value or an unreadable marker; a key absent is a miss."""
        return self._guard(self._read, keys) if keys else {}

    def write_many(self, items: dict[str, tuple[dict[str, Any], int]]) -> None:
        """``{key: (record, ttl seconds)}``."""
        if items:
            self._guard(self._write, {key: (encode_text(value), ttl) for key, (value, ttl) in items.items()})

    def touch(self, key: str, ttl: int) -> bool:
        return bool(self._guard(self._touch, key, ttl))

    @staticmethod
    def _guard(operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return operation(*args, **kwargs)
        except Exception as exc:
            if is_outage(exc):
                raise CacheUnavailable(str(exc) or type(exc).__name__) from exc
            raise

    def _read(self, keys: list[str]) -> dict[str, Any]:
        """key -> decoded value, for the keys present (each store reads its own way)."""
        raise NotImplementedError

    def _write(self, items: Texts) -> None:
        raise NotImplementedError

    def _touch(self, key: str, ttl: int) -> bool:
        return self.cache.touch(key, ttl)  # an expiry update: nothing is deserialized


class RedisRecords(RecordStore):
    def __init__(self, cache: BaseCache, client: Callable[[bool], Redis], make_key: Callable[[str], str]):
        super().__init__(cache)
        self._client, self._key = client, make_key  # client(write) -> the redis-py client

    def _read(self, keys: list[str]) -> dict[str, Any]:
        raws = self._client(False).mget([self._key(key) for key in keys])
        return {key: decode_text(raw) for key, raw in zip(keys, raws) if raw is not None}

    def _write(self, items: Texts) -> None:
        pipe = self._client(True).pipeline(transaction=False)
        for key, (text, ttl) in items.items():
            pipe.set(self._key(key), text, ex=ttl)
        pipe.execute()

    def _touch(self, key: str, ttl: int) -> bool:
        return bool(self._client(True).expire(self._key(key), ttl))


class DatabaseRecords(RecordStore):
    """Django's database cache table, with the JSON text in ``value`` (PostgreSQL or SQLite:
    the write is an ``INSERT ... ON CONFLICT``)."""

    def __init__(self, cache: DatabaseCache):
        super().__init__(cache)
        self.cache: DatabaseCache = cache
        self._table: str = cache._table  # type: ignore[attr-defined]  # set by BaseDatabaseCache, not in the stubs

    def _database(self, write: bool) -> str:
        from django.db import router

        route = router.db_for_write if write else router.db_for_read
        return route(self.cache.cache_model_class)

    def _read(self, keys: list[str]) -> dict[str, Any]:
        from django.utils import timezone

        from runnerq_django.storage import cache_table

        by_name = {self.cache.make_and_validate_key(key): key for key in keys}
        rows = cache_table.read_values(
            self._database(write=False), self._table, list(by_name), timezone.now()
        )
        return {by_name[name]: decode_text(value) for name, value in rows}

    def _write(self, items: Texts) -> None:
        from django.utils import timezone

        from runnerq_django.storage import cache_table

        now = timezone.now()
        cache_table.write_values(
            self._database(write=True),
            self._table,
            [
                (self.cache.make_and_validate_key(key), text, now + timedelta(seconds=ttl))
                for key, (text, ttl) in items.items()
            ],
        )


class LocalRecords(RecordStore):
    """A process-local cache: its pickles never leave this process, so the API is safe."""

    def _read(self, keys: list[str]) -> dict[str, Any]:
        return {key: decode_text(raw) for key, raw in self.cache.get_many(keys).items()}

    def _write(self, items: Texts) -> None:
        for key, (text, ttl) in items.items():
            self.cache.set(key, text, ttl)


def _is_a(obj: object, module: str, name: str) -> bool:
    """``isinstance`` against a class of a module only if that module is loaded (an object of
    an extra's class means the extra is loaded: nothing is imported here)."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls is not None and isinstance(obj, cls)


def records_in(cache: BaseCache) -> RecordStore:
    """The record store for a cache backend, or :class:`CacheMisconfigured` (``runnerq.E104``)
    for a backend the scheduler could only read by unpickling."""
    if _is_a(cache, "django_redis.cache", "RedisCache"):
        untyped: Any = cache  # django-redis ships no types
        client = untyped.client
        if _is_a(client, "django_redis.client.sharded", "ShardClient") or not _is_a(
            client, "django_redis.client.default", "DefaultClient"
        ):
            raise _unsafe(
                f"its django-redis client class {type(client).__name__} is not supported",
                "use django_redis.client.DefaultClient (or SentinelClient, HerdClient)",
            )
        return RedisRecords(cache, lambda write: client.get_client(write=write), client.make_key)
    if _is_a(cache, "django.core.cache.backends.redis", "RedisCache"):
        redis_cache = cast("DjangoRedisCache", cache)
        return RedisRecords(
            cache, lambda write: redis_cache._cache.get_client(write=write), cache.make_and_validate_key
        )
    if _is_a(cache, "django.core.cache.backends.db", "DatabaseCache"):
        return DatabaseRecords(cast("DatabaseCache", cache))
    if _is_a(cache, "django.core.cache.backends.locmem", "LocMemCache") or _is_a(
        cache, "django.core.cache.backends.dummy", "DummyCache"
    ):
        return LocalRecords(cache)
    raise _unsafe(
        f"uses {type(cache).__module__}.{type(cache).__qualname__}, which unpickles what it reads",
        "use django-redis, Django's RedisCache or DatabaseCache: the scheduler reads and writes "
        "those as plain JSON",
    )


def _unsafe(problem: str, fix: str) -> CacheMisconfigured:
    from runnerq_django.scheduler.cachetable import cache_alias

    return CacheMisconfigured(
        "runnerq.E104", f"The scheduler's cache alias {cache_alias()!r}: {problem}", fix
    )


def alias_cache() -> BaseCache:
    """The cache of ``RUNNERQ['SCHEDULER']['CACHE']``, or :class:`CacheMisconfigured` saying what
    to do: the alias is missing (``runnerq.E103``) or its backend can't be loaded (``E105``)."""
    from django.conf import settings
    from django.core.cache import InvalidCacheBackendError, caches

    from runnerq_django.scheduler.cachetable import cache_alias

    alias = cache_alias()
    config = settings.CACHES.get(alias)
    if config is None:
        raise CacheMisconfigured(
            "runnerq.E103",
            f"RUNNERQ['SCHEDULER']['CACHE'] names cache alias {alias!r}, which is not in CACHES; the periodic "
            "scheduler needs it",
            "add a django-redis cache with its JSONSerializer (or, without Redis, "
            'django.core.cache.backends.db.DatabaseCache); see README "The cache"',
        )
    try:
        return caches[alias]
    except InvalidCacheBackendError as exc:
        backend = str(config.get("BACKEND", ""))
        fix = REDIS_EXTRA if backend.startswith("django_redis") else "fix its BACKEND"
        raise CacheMisconfigured(
            "runnerq.E105", f"The scheduler's cache alias {alias!r} can't be loaded: {exc}", fix
        ) from exc


def alias_records() -> RecordStore:
    """The record store of the scheduler's alias (:class:`CacheMisconfigured` when it can't be used)."""
    return records_in(alias_cache())
