"""LISTEN on a psycopg connection, and dedicated LISTEN connections built from a Django database
alias.

A process's ``result()`` waits listen on a session of their own (``result_notices``): it must
outlive any one transaction and nobody else may use it, so it cannot be a request thread's Django
connection (which may sit inside the caller's ``atomic()``, or be closed at the end of a request).
The worker's dispatcher owns its thread and never opens a transaction there, so it listens on its
own Django connection (``worker.listener``). The dedicated connections are plain psycopg, in
autocommit, opened with the same parameters Django would use. Behind PgBouncer in transaction
pooling ``LISTEN`` does not work; ``RUNNERQ['LISTEN'] = False`` makes every waiter poll instead.

Internal: not part of the public API.
"""

from __future__ import annotations

from typing import Any

import psycopg

from runnerq_django.storage import session


def connection_params(alias: str | None = None) -> dict[str, Any]:
    from django.db import connections

    from runnerq_django import conf

    params = dict(connections[alias or conf.database_alias()].get_connection_params())
    # Django's cursor class and adapters are for its ORM; a listener only needs strings.
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    params.setdefault("application_name", "runnerq-listener")
    return params


def connect(alias: str | None = None, *, connect_timeout: float = 10) -> psycopg.Connection:
    params = connection_params(alias)
    params.setdefault("connect_timeout", max(1, int(connect_timeout)))
    return psycopg.connect(autocommit=True, **params)


def listen(conn: psycopg.Connection[Any], channel: str) -> None:
    """``LISTEN`` on ``channel`` (quoted: a queue name may need it)."""
    session.listen(conn, channel)
