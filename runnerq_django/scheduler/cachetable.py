"""The scheduler's cache alias, and its table when that alias is Django's database cache."""

from __future__ import annotations

from django.conf import settings

DATABASE_CACHE = "django.core.cache.backends.db.DatabaseCache"


def cache_alias() -> str:
    from runnerq_django import conf

    alias: str = conf.get("SCHEDULER")["CACHE"]  # a string: the settings check says so
    return alias


def ensure_cache_table(database: str | None = None) -> bool:
    """Create the table of the scheduler's cache alias if it is a DatabaseCache and the table is
    missing (``createcachetable`` for that one alias). Returns whether the alias is a DB cache."""
    from django.core.management import call_command

    from runnerq_django import conf

    config = settings.CACHES.get(cache_alias())
    if not config or config.get("BACKEND") != DATABASE_CACHE:
        return False
    call_command(
        "createcachetable", config["LOCATION"], database=database or conf.database_alias(), verbosity=0
    )
    return True
