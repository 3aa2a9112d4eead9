"""``0002_scheduler`` reads the scheduler's cache alias itself (a migration imports nothing above
the schema): it must read it as ``conf`` and the scheduler do."""

from __future__ import annotations

import importlib

from runnerq_django import conf
from runnerq_django.scheduler import cachetable

migration = importlib.import_module("runnerq_django.migrations.0002_scheduler")


def test_the_migration_defaults_to_the_scheduler_cache_alias():
    assert conf.DEFAULTS["SCHEDULER"]["CACHE"] == migration.DEFAULT_SCHEDULER_CACHE
    assert migration.DATABASE_CACHE == cachetable.DATABASE_CACHE
