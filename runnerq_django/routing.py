"""Which database each queue lives on, and the database router that puts the schema there.

A queue lives on ``RUNNERQ['DATABASE']`` (``"default"`` unless set) unless
``RUNNERQ['QUEUE_DATABASES']`` names another Django database alias for it::

    RUNNERQ = {"QUEUE_DATABASES": {"billing": "billing_db"}}

:func:`database_for` is the one place that answers "which alias?": ``enqueue()`` and the rest of
the client, ``runworker`` (one set of connections, listener, leases, reaper and retention per
database), the scheduler, the admin and the operator commands all ask it. An explicit ``using=``
(``--database`` on the command line) still wins, as it always did.

Each database is a whole RunnerQ schema, the one the Go and TypeScript SDKs share: nothing in the
rows says which database they are on, and a workflow tree never spans two (a child lives with
its parent). Inside ``transaction.atomic(using=alias)`` an enqueue commits or rolls back with
that alias's rows only; :func:`refuse_outside_transaction` is the guard against an enqueue that
would silently leave such a block.

:class:`RunnerQRouter`, in ``DATABASE_ROUTERS``, lets ``migrate --database <alias>`` create the
RunnerQ tables on every alias that hosts a queue, and on no other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections

from runnerq_django import conf
from runnerq_django.exceptions import CrossDatabaseError

__all__ = [
    "CrossDatabaseError",
    "RunnerQRouter",
    "by_database",
    "database_for",
    "databases",
    "refuse_outside_transaction",
]

APP_LABEL = "runnerq_django"


def database_for(queue: str, using: str | None = None) -> str:
    """The Django database alias of ``queue``: ``using`` when given, else the queue's entry in
    ``RUNNERQ['QUEUE_DATABASES']``, else ``RUNNERQ['DATABASE']``."""
    if using:
        return using
    current = conf.runnerq_settings()
    return current.queue_databases.get(queue, current.database)


def databases(queues: Iterable[str] | None = None) -> list[str]:
    """The aliases that host ``queues`` (default: every alias that hosts a queue, the
    ``RUNNERQ['DATABASE']`` one first, then ``RUNNERQ['QUEUE_DATABASES']``' in their order)."""
    if queues is not None:
        return list(dict.fromkeys(database_for(queue) for queue in queues))
    current = conf.runnerq_settings()
    return list(dict.fromkeys([current.database, *current.queue_databases.values()]))


def by_database(queues: Iterable[str], using: str | None = None) -> dict[str, list[str]]:
    """``queues`` grouped by their alias (all of them on ``using`` when given), in order."""
    grouped: dict[str, list[str]] = {}
    for queue in dict.fromkeys(queues):
        grouped.setdefault(database_for(queue, using), []).append(queue)
    return grouped


def refuse_outside_transaction(alias: str, queue: str, *, allowed: bool = False) -> None:
    """Refuse (:class:`CrossDatabaseError`) a write to ``queue`` on ``alias`` made inside an
    ``atomic()`` block of another database while ``alias`` has none of its own: the write would
    commit at once, whatever that block does, and the all-or-nothing guarantee the caller may be
    counting on would silently not hold. ``allowed`` (``enqueue(..., across_databases=True)``)
    says the caller knows."""
    if allowed or len(connections.settings) < 2:
        return  # one database configured: there is no other transaction to leave
    others = sorted(
        connection.alias
        for connection in connections.all(initialized_only=True)
        if connection.alias != alias and connection.in_atomic_block
    )
    if not others:
        return
    target = connections[alias]
    if target.in_atomic_block or not target.get_autocommit():
        return  # the caller opened a transaction on the queue's own database: it joins that one
    raise CrossDatabaseError(
        f"queue {queue!r} lives on database {alias!r}, but this enqueue runs inside "
        f"transaction.atomic() on {', '.join(repr(o) for o in others)}: it would commit on {alias!r} "
        "at once and stay if that transaction rolls back. Enqueue inside "
        f"transaction.atomic(using={alias!r}), after the commit (transaction.on_commit), or pass "
        "across_databases=True to accept it (docs/how-to/several-databases.md)."
    )


class RunnerQRouter:
    """A database router (``DATABASE_ROUTERS = ["runnerq_django.routing.RunnerQRouter"]``):
    ``migrate --database <alias>`` creates the RunnerQ tables on every alias that hosts a queue
    (:func:`databases`) and skips them elsewhere. It says nothing about other apps' models, and
    nothing about reads and writes: the package names its alias on every query."""

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != APP_LABEL:
            return None
        return db in databases()
