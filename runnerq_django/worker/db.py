"""Database connection hygiene for long-lived worker threads.

Django opens one connection per thread and, outside a request cycle, never replaces a broken one:
after ``pg_terminate_backend``, a failover or a network blip every later query on it fails. The
worker's threads therefore close their connection after a connection-class error, so the next
call reconnects, and retry idempotent storage calls a few times with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from psycopg import pq

from runnerq_django import metrics
from runnerq_django.logs import log_event
from runnerq_django.storage import errors, session

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("runnerq_django.worker")

T = TypeVar("T")

# Errors after which the connection may be dead, and that a retry may get past.
TRANSIENT = (OperationalError, InterfaceError, errors.Unavailable, errors.Timeout, errors.Conflict)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT)


def reset_connection(alias: str) -> None:
    """Drop this thread's connection for ``alias`` so the next query opens a fresh one."""
    connection = connections[alias]
    try:
        if connection.in_atomic_block:
            return  # an atomic() owner must see its error; it can't continue on a new session anyway
        connection.close()
    except DatabaseError:
        connection.connection = None  # closing a dead socket failed; forget it all the same


def heal_connection(alias: str) -> None:
    """Before the next activity on a thread: if the last one hit a database error, check the
    connection (one ``SELECT 1``) and drop it when dead, so one broken session doesn't fail the
    next handler's first query too. Free when nothing went wrong."""
    heal(connections[alias], alias)


def heal(connection: BaseDatabaseWrapper, alias: str) -> None:
    """:func:`heal_connection` of ``connection``, the calling thread's one for ``alias``."""
    if connection.connection is None or connection.in_atomic_block:
        return
    if connection.connection.info.transaction_status == pq.TransactionStatus.ACTIVE:
        # A query cut short by an exception raised into this thread (a lost lease's or a time
        # limit's interrupt) leaves the session busy with its result: Django did not see an
        # error, and every later statement on it would fail. No round trip to tell.
        reset_connection(alias)
        return
    if not connection.errors_occurred:
        return
    if connection.is_usable():
        connection.errors_occurred = False
    else:
        reset_connection(alias)


def retrying(
    alias: str,
    what: str,
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    first_pause: float = 0.05,
    stop: threading.Event | None = None,
) -> T:
    """``fn()``, retried after transient database errors (the storage operations the worker
    retries are idempotent under the same claim, per the spec). Raises the last error."""
    pause = first_pause
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TRANSIENT as exc:
            reset_connection(alias)
            if attempt == attempts or (stop is not None and stop.is_set()):
                raise
            metrics.inc("storage_retry")
            log_event(
                logger,
                logging.WARNING,
                "runnerq.storage.retry",
                "The database write %(operation)r failed (try %(attempt)s; retrying it): %(error)s",
                operation=what,
                attempt=attempt,
                error=str(exc),
            )
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
    raise AssertionError("unreachable")


def _once_per_session(marks: threading.local, alias: str, set_up: Callable[[str], None]) -> None:
    """Run ``set_up(alias)`` unless this thread's session of ``alias`` already had it: ``marks``
    remembers the driver connection it ran on (a reconnection is a new session)."""
    connection = connections[alias]
    connection.ensure_connection()
    raw = connection.connection
    if getattr(marks, alias, None) is raw:
        return
    set_up(alias)
    setattr(marks, alias, raw)


_relaxed = threading.local()


def relax_commit(alias: str) -> None:
    """Let this thread's session commit without waiting for the WAL flush.

    Only for writes whose loss in a *database* crash is harmless under at-least-once delivery:
    a claim or lease renewal that vanishes leaves the activity runnable (or its lease expiring),
    and it runs again, exactly as after a worker crash. Completions, failures, checkpoints and
    enqueues stay durable. Saves one fsync (milliseconds on most disks) per claim round trip,
    which is most of an idle worker's enqueue-to-start latency. Set once per session, so not
    behind PgBouncer in transaction pooling (the ``--no-listen`` mode), where a session setting
    would leak to other clients sharing the server connection.
    """
    _once_per_session(_relaxed, alias, session.relax_commit)


_generic = threading.local()


def plan_claims_generically(alias: str) -> None:
    """Let this thread's session always run the generic plan of its prepared statements
    (``plan_cache_mode = force_generic_plan``): the dispatcher's, for its claims.

    The generic plan of a claim is planned for a queue of average size; the custom plan, for the
    claimed queue's own name. For an idle queue beside a busy one, Postgres costs its claim far
    below the generic plan (it expects one row, not a full batch), keeps choosing a custom plan,
    and plans every claim anew: after bench/throughput.py's backlogs an idle one-row claim took
    1.57 ms at the p50 instead of 0.78 (bench/PROFILE.md). The claims' row bounds are literals
    (``storage.sql.claims.with_bounds``) so that their generic plans are sound, and
    tests/storage/test_claim_plan.py checks the generic plan of every claim shape. Not for a
    dispatcher with concurrency- or rate-limited types: their claims' generic plans cost the
    limited burn-down nearly twice the Postgres CPU (bench/flow_burndown.py). Set once per
    session, as ``relax_commit`` (so not behind PgBouncer in transaction pooling).
    """
    _once_per_session(_generic, alias, session.plan_generically)


_no_jit = threading.local()


def claim_without_jit(alias: str) -> None:
    """Let this thread's session never JIT-compile a statement (``jit = off``): the dispatcher's,
    for its claims.

    Postgres compiles a statement whose estimated cost passes ``jit_above_cost`` (100,000), and
    the estimates of the claims of several types and of limited types grow with the table: on a
    table of 140,000 activities the generic plan of a 20-type claim was costed at 106,000, and
    compiling it took 29 ms of every 30 ms claim (the burn-down fell from 12,000 to 900 a
    second; bench/PROFILE.md). A claim reads and writes a few dozen rows, which compiled code
    never repays. Set once per session, as ``relax_commit`` (so not behind PgBouncer in
    transaction pooling, where docs/how-to/pgbouncer.md says to turn it off for the worker's
    role, and the worker warns at start when it is on: ``warn_when_jit_is_on``).
    """
    _once_per_session(_no_jit, alias, session.turn_jit_off)


def warn_when_jit_is_on(alias: str) -> None:
    """Without session settings (``--no-listen``: PgBouncer in transaction pooling) the
    dispatcher can't turn ``jit`` off for its claims: say so once when the server has it on."""
    try:
        on = session.jit_on(alias)
    except DatabaseError:  # a warning is not worth failing the start for
        return
    if on:
        log_event(
            logger,
            logging.WARNING,
            "runnerq.worker.jit_on",
            "jit is on for the worker's sessions: Postgres may JIT-compile claims of several or limited"
            " types (tens of ms each) once the table is large. Turn it off for the worker's role"
            " (ALTER ROLE ... SET jit = off); see docs/how-to/pgbouncer.md.",
        )


class Backoff:
    """Pauses between attempts of a loop that keeps failing: 0.1 s doubling to ``maximum``."""

    def __init__(self, first: float = 0.1, maximum: float = 5.0):
        self.first = first
        self.maximum = maximum
        self.current = 0.0

    def failed(self) -> float:
        self.current = self.first if not self.current else min(self.current * 2, self.maximum)
        return self.current

    def succeeded(self) -> None:
        self.current = 0.0
