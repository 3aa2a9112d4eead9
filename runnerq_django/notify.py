"""Dedicated LISTEN connections, built from a Django database alias.

``LISTEN`` needs a session that outlives any one transaction and that nobody else uses, so it
cannot be Django's per-thread connection (which may sit inside the caller's ``atomic()``, or be
closed at the end of a request). These connections are plain psycopg, in autocommit, opened with
the same parameters Django would use. Behind PgBouncer in transaction pooling ``LISTEN`` does
not work; ``RUNNERQ['LISTEN'] = False`` makes every waiter poll instead.

Internal: not part of the public API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from psycopg import sql

from runnerq_django.storage import sql_session


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
    conn.execute(sql.SQL(sql_session.LISTEN).format(sql.Identifier(channel)))


class Listener:
    """One LISTEN session on some channels. ``wait(timeout)`` yields the payloads that arrived.

    Not thread-safe: one thread owns a listener (psycopg serialises a connection's use anyway).
    """

    def __init__(self, channels: Iterable[str], alias: str | None = None):
        self.channels = list(channels)
        self.conn = connect(alias)
        for channel in self.channels:
            listen(self.conn, channel)

    def wait(self, timeout: float) -> Iterator[psycopg.Notify]:
        """Notifications arriving within ``timeout`` seconds; returns early after the first burst."""
        return self.conn.notifies(timeout=max(0.0, timeout), stop_after=1)

    def pending(self) -> list[psycopg.Notify]:
        """The notifications already here, without waiting for more."""
        return list(self.conn.notifies(timeout=0))

    def close(self) -> None:
        # Closing a broken connection must not hide the error that broke it.
        with contextlib.suppress(Exception):
            self.conn.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
