"""The setup every benchmark shares: a migrated scratch database with Django set up on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def migrated_database(prefix: str = "rq_bench") -> Iterator[str]:
    """A scratch database on the server of ``DATABASE_URL`` (the embedded one when unset), named
    ``<prefix>_...`` and dropped afterwards, migrated, with Django set up on it in production
    settings (DEBUG keeps a log of every query) and without the test project's example tour;
    yields its URL, also left in ``DATABASE_URL`` for the worker processes a benchmark starts."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ["DJANGO_DEBUG"] = "0"
    from testproject.database import database_url
    from tests.helpers import scratch_database

    with scratch_database(database_url(), prefix=prefix) as url:
        os.environ["DATABASE_URL"] = url
        import django
        from django.core.management import call_command
        from django.db import connections

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        try:
            yield url
        finally:
            connections.close_all()
