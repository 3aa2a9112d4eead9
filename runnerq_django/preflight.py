"""What a command checks before any work: the database answers and holds the RunnerQ tables.

A first run usually fails here (no server, a typo in the database name, migrations never
applied), and each of these is one line that says what to do, not a traceback: commands exit
with status 78 (EX_CONFIG) like every other configuration error. Only start-up is checked; a
running worker rides out outages with its retries.

Internal: not part of the public API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.core.management.base import CommandError
from django.db import connections

from runnerq_django.exceptions import RunnerQError
from runnerq_django.storage import session
from runnerq_django.storage.errors import MIGRATE_HINT, SchemaMissing
from runnerq_django.worker.supervisor import EX_CONFIG

CONNECT_TIMEOUT_SECONDS = 5


class DatabaseUnreachable(RunnerQError):
    """The database does not exist or does not answer."""


def describe(alias: str) -> str:
    """``database "x" at host:port`` (never the password)."""
    settings = connections[alias].settings_dict
    host = settings.get("HOST") or "the local socket"
    port = settings.get("PORT") or "5432"
    return f'database "{settings.get("NAME")}" at {host}:{port}'


def require_database(alias: str, *, tables: bool = True) -> None:
    """Raise :class:`DatabaseUnreachable` or :class:`SchemaMissing` with a one-line message."""
    connection = connections[alias]
    params = connection.get_connection_params()
    # A server that drops packets would otherwise hang libpq for as long as the OS lets it.
    params["connect_timeout"] = min(
        int(params.get("connect_timeout") or CONNECT_TIMEOUT_SECONDS), CONNECT_TIMEOUT_SECONDS
    )
    try:
        connection.Database.connect(**params).close()
    except connection.Database.Error as exc:
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise DatabaseUnreachable(f"can't connect to {describe(alias)}: {reason}") from None
    if tables:
        missing, expected = missing_tables(alias)
        if missing:
            which = "" if len(missing) == expected else f" ({', '.join(missing)})"
            raise SchemaMissing(
                f"the RunnerQ tables are missing from {describe(alias)}{which}: {MIGRATE_HINT}"
            )


def missing_tables(alias: str) -> tuple[list[str], int]:
    """The app's tables (the spec's and its own) that the database's search path does not have,
    and how many there are in all."""
    from django.apps import apps

    names = sorted(
        {
            model._meta.db_table
            for model in apps.get_app_config("runnerq_django").get_models()
            if model._meta.managed
        }
    )
    return session.missing_tables(alias, names), len(names)


P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(handle: Callable[P, R]) -> Callable[P, R]:
    """A command's ``handle`` whose first-run errors end it with their message and status 78."""

    @functools.wraps(handle)
    def wrapper(*args: P.args, **options: P.kwargs) -> R:
        try:
            return handle(*args, **options)
        except (DatabaseUnreachable, SchemaMissing) as exc:
            raise CommandError(str(exc), returncode=EX_CONFIG) from None

    return wrapper
