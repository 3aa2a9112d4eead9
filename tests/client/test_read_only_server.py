"""A session left on a server that takes no writes: what a failover does to the sessions of the
primary it demotes (pg_auto_failover sets ``default_transaction_read_only`` on it and reloads; a
managed service's old writer may come back as a reader behind the same endpoint). Every write
there fails with ``read_only_sql_transaction`` (25006), and Django's health check (a ``SELECT 1``)
passes, so without help the process would stay on that session for good. The enqueue that meets
it raises ``Unavailable`` and drops the session; the next opens a new one, which a multi-host URL
with ``target_session_attrs=read-write`` (or the endpoint) points at the new primary.

Here the read-only server is the test's own session with ``default_transaction_read_only`` set:
the server reports the change to the client as it reports a reload's."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from runnerq_django.storage.db import read_only_server
from runnerq_django.storage.errors import Unavailable
from tests.worker import handlers
from tests.worker.support import row_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.direct_postgres(
        "it sets a session setting, which transaction pooling would leave on a server connection other "
        "clients share (and PgBouncer does not pass the server's report of it on)"
    ),
]


def _demote_own_session() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    assert read_only_server(connection.connection)


def test_a_write_refused_as_read_only_is_unavailable_and_the_next_one_reconnects():
    handlers.echo.enqueue("opens the connection")
    assert not read_only_server(connection.connection)
    _demote_own_session()
    with pytest.raises(Unavailable, match="takes no writes") as refused:
        handlers.echo.enqueue("on the read-only session")
    assert getattr(refused.value.__cause__, "sqlstate", None) == "25006"
    assert connection.connection is None  # dropped: the next operation opens a new session
    handle = handlers.echo.enqueue("on a new session")
    assert handle.created and row_of(handle.id)["status"] == "pending"
    assert not read_only_server(connection.connection)


def test_a_read_only_session_inside_atomic_is_left_to_the_block():
    handlers.echo.enqueue("opens the connection")
    _demote_own_session()
    with transaction.atomic():
        with pytest.raises(Unavailable, match="takes no writes"):
            handlers.echo.enqueue("inside the block")
        # Not closed under the block: a new session would silently drop the block's writes.
        assert connection.in_atomic_block and connection.connection is not None
        transaction.set_rollback(True)
    connection.close()  # the test's own SET outlives the block; a new session has it off
    assert handlers.echo.enqueue("after the block").created


def test_other_unavailable_errors_leave_a_healthy_read_only_session_alone():
    """Only a refused write drops sessions on read-only servers (a console's replica session, a
    standby the project reads from, is read-only by design)."""
    from runnerq_django.storage.db import drop_broken_connections

    handlers.echo.enqueue("opens the connection")
    _demote_own_session()
    drop_broken_connections()
    assert connection.connection is not None
    drop_broken_connections(read_only=True)
    assert connection.connection is None
