"""How storage operations reach Postgres: the Django connection of the configured alias, one
statement per round trip, and database errors mapped to the spec's error kinds.

Operations run on the Django connection (not a pool of their own) so that a call inside the
caller's ``transaction.atomic()`` commits or rolls back with the caller's own writes. Outside
one, Django's autocommit makes each single-statement operation its own transaction.
"""

from __future__ import annotations

import functools
import json
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction

from runnerq_django.storage import config, errors
from runnerq_django.storage.sql import claims as sql_claims
from runnerq_django.storage.sql import session as sql_session

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

P = ParamSpec("P")
R = TypeVar("R")
Row = tuple[Any, ...]
# Named parameters (%(name)s) for the catalogue's statements; positional (%s) for a few reads.
Params = Mapping[str, Any] | Sequence[Any] | None


def alias_for(using: str | None) -> str:
    """``using`` when given, else the alias of the storage the operation runs on."""
    return using or config.active().alias


def fetch_all(alias: str, sql: str, params: Params = None) -> list[Row]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if _returns_rows(cursor) else []


def _returns_rows(cursor: Any) -> bool:
    """Whether the cursor's current result is a row set (a SELECT or a RETURNING, even with no
    rows), as ``cursor.description`` tells, without building its column objects (19 us for the
    claim's 21 columns, on every claim)."""
    result = cursor.pgresult
    return result is not None and bool(result.nfields or result.status == _libpq().TUPLES_OK)


def fetch_one(alias: str, sql: str, params: Params = None) -> Row | None:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if _returns_rows(cursor) else None


def fetch_row(alias: str, sql: str, params: Params = None) -> Row:
    """The one row of a statement that always returns one (an aggregate, a CTE's summary)."""
    row = fetch_one(alias, sql, params)
    if row is None:
        raise errors.Internal("a storage statement that returns one row returned none")
    return row


def fetch_one_prepared(alias: str, sql: str, params: dict[str, Any]) -> Row | None:
    """Run ``sql`` as a server-side prepared statement on the Django connection of ``alias``
    (inside the caller's transaction when there is one): Postgres plans it once per connection.
    Falls back to ``fetch_one`` where prepared statements can't be used (PgBouncer before 1.21
    in transaction pooling: ``StorageConfig.prepared_statements``)."""
    if not prepared_statements():
        return fetch_one(alias, sql, params)
    row: tuple[Any, ...] | None = _run_prepared(alias, sql, params, lambda cursor: cursor.fetchone())
    return row


class TextStatement:
    """A statement with positional parameters (``$1`` ...) that ``fetch_value_in_autocommit``
    runs prepared below psycopg's cursors: its name on the server, and its text."""

    def __init__(self, name: str, text: str):
        self.name = name.encode()
        self.text = text.encode()


# The TextStatements prepared on each libpq connection (a new connection prepares them again).
_raw_prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()


def fetch_value_in_autocommit(alias: str, statement: TextStatement, params: list[bytes | None]) -> Any | None:
    """The first column of the first row of ``statement`` (its parameters already as text bytes),
    run prepared straight on the libpq connection under Django's connection of ``alias``: no
    psycopg cursor, query conversion or parameter dumping, which were about a third of a
    one-by-one enqueue's client CPU. One round trip (and one more on a connection's first
    call, to prepare it). Only in autocommit outside any transaction (psycopg would have to send
    the BEGIN of the caller's transaction first) and with prepared statements allowed; returns
    ``NOT_RUN`` otherwise, for the caller to run its usual statement instead."""
    if not prepared_statements():
        return NOT_RUN
    psycopg = _libpq()
    connection = connections[alias]
    connection.ensure_connection()
    raw = connection.connection
    pgconn = raw.pgconn
    if not raw.autocommit or pgconn.transaction_status != psycopg.IDLE or raw._pipeline is not None:
        return NOT_RUN
    with connection.wrap_database_errors:
        prepared = _prepared_on(pgconn)
        if statement.name not in prepared:
            _prepare(raw, statement, psycopg)
            prepared.add(statement.name)
        pgconn.send_query_prepared(statement.name, params)
        results = raw.wait(psycopg.execute(pgconn))
        if results[-1].status != psycopg.TUPLES_OK and results[-1].error_field(psycopg.SQLSTATE) == b"26000":
            # Gone: psycopg sends DEALLOCATE ALL after a ROLLBACK (or a DROP) when it has
            # prepared statements of its own. The statement failed whole (autocommit): prepare
            # it again and send it again.
            _prepare(raw, statement, psycopg)
            pgconn.send_query_prepared(statement.name, params)
            results = raw.wait(psycopg.execute(pgconn))
        result = _check(results, psycopg.TUPLES_OK)
        if connection.queries_logged:
            _logged(connection, statement.text.decode())
        value = result.get_value(0, 0) if result.ntuples else None
        return None if value is None else bytes(value).decode()


NOT_RUN = object()

# The last connection's entry of _raw_prepared: a WeakKeyDictionary look-up makes a weak
# reference each time, and a process enqueueing one by one asks for the same connection each time.
_last_prepared: tuple[Any, set[bytes]] = (None, set())


def _prepared_on(pgconn: Any) -> set[bytes]:
    """The names of the TextStatements prepared on ``pgconn``."""
    global _last_prepared
    last = _last_prepared  # one read: another thread may replace it meanwhile
    if last[0] is pgconn:
        return last[1]
    prepared = _raw_prepared.setdefault(pgconn, set())
    _last_prepared = (pgconn, prepared)
    return prepared


def _prepare(raw: Any, statement: TextStatement, psycopg: _Libpq) -> None:
    raw.pgconn.send_prepare(statement.name, statement.text)
    _check(raw.wait(psycopg.execute(raw.pgconn)), psycopg.COMMAND_OK)


class _Libpq:
    """What ``fetch_value_in_autocommit`` uses of psycopg, imported once (on first use: the
    storage layer imports no driver until it runs a statement)."""

    def __init__(self) -> None:
        from psycopg import errors, generators
        from psycopg.pq import DiagnosticField, ExecStatus, TransactionStatus

        self.execute = generators.execute
        self.error_from_result = errors.error_from_result
        self.IDLE = TransactionStatus.IDLE
        self.COMMAND_OK = ExecStatus.COMMAND_OK
        self.TUPLES_OK = ExecStatus.TUPLES_OK
        self.SQLSTATE = DiagnosticField.SQLSTATE


_libpq_parts: _Libpq | None = None


def _libpq() -> _Libpq:
    global _libpq_parts
    if _libpq_parts is None:
        _libpq_parts = _Libpq()
    return _libpq_parts


def _check(results: list[Any], expected: Any) -> Any:
    """The last result of a round trip, raised as psycopg's error when the statement failed."""
    result = results[-1]
    if result.status != expected:
        raise _libpq().error_from_result(result, encoding="utf-8")
    return result


def fetch_all_prepared(alias: str, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """``fetch_one_prepared``, all the rows (``fetch_all`` without prepared statements)."""
    if not prepared_statements():
        return fetch_all(alias, sql, params)
    rows: list[tuple[Any, ...]] = _run_prepared(
        alias, sql, params, lambda cursor: cursor.fetchall() if _returns_rows(cursor) else []
    )
    return rows


def _run_prepared(alias: str, sql: str, params: dict[str, Any], fetch: Callable[[Any], Any]) -> Any:
    """Execute ``sql`` prepared on the Django connection of ``alias``, log it, and return
    ``fetch(cursor)`` (one row or all of them)."""
    connection = connections[alias]
    with _prepared(connection) as raw, _execute_prepared(raw, sql, params) as cursor:
        _logged(connection, sql)
        return fetch(cursor)


def fetch_in_one_transaction_prepared(
    alias: str, statements: list[str], params: dict[str, Any]
) -> list[list[tuple[Any, ...]]]:
    """``fetch_in_one_transaction`` with each statement prepared (planned once per connection),
    still one round trip: the statements go in psycopg's pipeline mode, followed by one Sync.
    Outside the caller's transaction (autocommit), the statements before a Sync are one implicit
    transaction (the extended protocol's, as a multi-statement query is the simple protocol's):
    committed at the Sync, rolled back whole if one fails, each statement with a snapshot of
    its own (READ COMMITTED). The commit is the session's usual one (``synchronous_commit`` as
    configured): durable when this returns. Inside the caller's transaction, part of it."""
    if not prepared_statements():
        return fetch_in_one_transaction(alias, statements, params)
    connection = connections[alias]
    with _prepared(connection) as raw:
        with raw.pipeline():
            cursors = [_execute_prepared(raw, statement, params) for statement in statements]
        _logged(connection, ";\n".join(statements))
        try:
            return [cursor.fetchall() if _returns_rows(cursor) else [] for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()


@functools.lru_cache(maxsize=1024)
def positional(statement: str) -> tuple[bytes, tuple[str, ...]] | None:
    """``statement`` as psycopg's ``RawCursor`` takes it, encoded: each ``%(name)s`` as ``$n``
    (a name that comes again keeps its number) and ``%%`` as ``%``; with the names in the order of
    their numbers. ``None`` when it holds a placeholder of another kind (``%(name)b``, a binary
    parameter), which only psycopg's own conversion sends.

    psycopg converts the placeholders of a query on every call and caches the conversion only
    for queries of up to 4,096 bytes: the claims of several types and of limited types are
    longer, and converting the 20-type claim took 36 us a call, as long as the rest of its
    Python (bench/PROFILE.md). Converted here once per statement text, a prepared statement goes
    by number."""
    if "%" in sql_claims.PLACEHOLDER_OR_PERCENT.sub("", statement):
        return None
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        return "%" if name is None else f"${numbers.setdefault(name, len(numbers) + 1)}"

    text = sql_claims.PLACEHOLDER_OR_PERCENT.sub(number, statement)
    return text.encode(), tuple(numbers)


def _execute_prepared(raw: Any, statement: str, params: dict[str, Any]) -> Any:
    """A psycopg cursor on ``raw`` that has executed ``statement`` prepared: by number where
    ``positional`` converts it, else with psycopg's conversion of its named placeholders."""
    import psycopg

    converted = positional(statement)
    if converted is None:
        cursor = psycopg.Cursor(raw)
        cursor.execute(statement, params, prepare=True)
        return cursor
    text, names = converted
    cursor = psycopg.RawCursor(raw)
    cursor.execute(text, [params[name] for name in names], prepare=True)
    return cursor


def prepared_statements() -> bool:
    """Whether hot statements run prepared (``StorageConfig.prepared_statements``; off for
    PgBouncer before 1.21 in transaction pooling)."""
    return config.active().prepared_statements


def _logged(connection: BaseDatabaseWrapper, sql: str) -> None:
    """Record a round trip made past Django's cursors where Django records its own (DEBUG, or a
    test's ``CaptureQueriesContext``), so that round trips stay countable."""
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": "0.000"})


@contextmanager
def _prepared(connection: BaseDatabaseWrapper) -> Iterator[Any]:
    """The psycopg connection under the Django ``connection``, with prepared statements allowed,
    and database errors raised as Django's."""
    connection.ensure_connection()
    raw = connection.connection
    # Django turns psycopg's prepared statements off for the whole connection (prepare_threshold
    # None); allow them for this use only, so Django's own cursors are unaffected.
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        with connection.wrap_database_errors:
            yield raw
    finally:
        raw.prepare_threshold = previous


def fetch_all_in_transactions(alias: str, sql: str, params: Params = None) -> list[Row]:
    """The rows of every statement of a query made of whole transactions (``BEGIN; ...;
    COMMIT; BEGIN; ...``), in order. Only in autocommit (``can_run_separate_transactions``).

    When a statement fails, Postgres skips the rest of the query but leaves the session inside
    the failed transaction block, which Django (in autocommit) knows nothing about: every later
    statement on the connection would fail with 25P02. So the failed transaction is rolled back
    here before the error goes up. The transactions before the failed one stay committed."""
    try:
        return [row for rows in fetch_result_sets(alias, sql, params) for row in rows]
    except DatabaseError:
        _roll_back_open_transaction(alias)
        raise


def _roll_back_open_transaction(alias: str) -> None:
    """ROLLBACK on the driver connection (a no-op with a warning when no transaction is open)."""
    raw = connections[alias].connection
    if raw is None:
        return
    try:
        with raw.cursor() as cursor:
            cursor.execute(sql_session.ROLLBACK)
    except Exception:  # a broken connection: the caller's error says enough, and Django drops it
        pass


def fetch_result_sets(alias: str, sql: str, params: Params = None) -> list[list[Row]]:
    """The rows of each statement of a multi-statement query, one list per statement that
    returns rows."""
    sets: list[list[Row]] = []
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        while True:
            if _returns_rows(cursor):
                sets.append(cursor.fetchall())
            if not cursor.nextset():
                return sets


def several_statements_per_query(alias: str) -> bool:
    """Whether one query may carry several statements: with client-side parameter binding
    (Django's default), not with server-side binding."""
    return not connections[alias].settings_dict.get("OPTIONS", {}).get("server_side_binding")


def fetch_in_one_transaction(alias: str, statements: list[str], params: dict[str, Any]) -> list[list[Row]]:
    """Run ``statements`` in one transaction, each with a snapshot of its own (READ COMMITTED),
    and return the rows of each.

    With client-side binding they travel as one query (one round trip): Postgres runs the
    statements of a multi-statement query as one implicit transaction when none is open, and
    as part of the caller's transaction otherwise; an error rolls the implicit one back whole.
    With server-side binding they are sent one by one inside ``atomic``."""
    if several_statements_per_query(alias):
        return fetch_result_sets(alias, ";\n".join(statements), params)
    with atomic(alias):
        return [fetch_all(alias, statement, params) for statement in statements]


def can_run_separate_transactions(alias: str) -> bool:
    """Whether one query may carry several ``BEGIN; ...; COMMIT;`` transactions: only in
    autocommit outside the caller's transaction, and only with client-side parameter binding
    (Django's default; server-side binding allows one statement per query)."""
    connection = connections[alias]
    if connection.in_atomic_block or connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        return False
    return connection.get_autocommit()  # AUTOCOMMIT=False: an implicit transaction is open


def in_transaction(alias: str) -> bool:
    """Whether statements on ``alias`` run in a transaction the caller opened (``atomic()``, or
    ``AUTOCOMMIT`` off), so that several of them commit or roll back together."""
    connection = connections[alias]
    return connection.in_atomic_block or not connection.get_autocommit()


def atomic(alias: str) -> transaction.Atomic:
    """One transaction for an operation that needs several statements (a savepoint when nested)."""
    return transaction.atomic(using=alias)


def loads(value: Any) -> Any:
    """A jsonb column's value: Django's psycopg backend hands jsonb over as text."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value


_NO_ZONE = object()
# Django's connection wrapper -> (its psycopg connection, the loader made for it): made once per
# connection, not per claim (opening a cursor for it was 2% of a burn-down worker's Python).
_timestamptz_loaders: weakref.WeakKeyDictionary[Any, tuple[Any, Callable[[str], datetime]]] = (
    weakref.WeakKeyDictionary()
)


def timestamptz_loader(alias: str) -> Callable[[str], datetime]:
    """Turns Postgres's text of a timestamptz into the datetime a fetch of the column would have
    returned (the loader of a cursor of this connection: its time zone, its DateStyle). Raises
    ``ValueError`` for a value Python's datetime can't hold (``infinity``, past year 9999 ...)."""
    wrapper = connections[alias]
    cached = _timestamptz_loaders.get(wrapper)
    if cached is not None and wrapper.connection is not None and cached[0] is wrapper.connection:
        return cached[1]
    load = _new_timestamptz_loader(wrapper)
    _timestamptz_loaders[wrapper] = (wrapper.connection, load)
    return load


def _new_timestamptz_loader(wrapper: Any) -> Callable[[str], datetime]:
    import psycopg
    from psycopg.pq import Format

    oid = psycopg.postgres.types["timestamptz"].oid
    with wrapper.cursor() as cursor:
        raw_cursor = cursor.cursor
        loader = raw_cursor.adapters.get_loader(oid, Format.TEXT)(oid, raw_cursor)
    # Django's loader (BaseTzLoader) parses the text, moves it to the session's zone, then puts
    # Django's zone on it in place of the session's. For a text in UTC ("+00", what a session
    # of Django with USE_TZ gets) the fields are the text's: datetime.fromisoformat reads them
    # at a tenth of the cost (two timestamps per claimed row). Anything else -- another zone,
    # BC, past year 9999, infinity -- goes through the loader as before.
    zone = getattr(type(loader), "timezone", _NO_ZONE)

    def load(text: str) -> datetime:
        if zone is not _NO_ZONE and text.endswith("+00"):
            try:
                return datetime.fromisoformat(text).replace(tzinfo=cast(tzinfo, zone))
            except ValueError:
                pass
        try:
            return cast(datetime, loader.load(text.encode()))
        except psycopg.DataError as exc:
            raise ValueError(str(exc)) from None

    return load


# SQLSTATE classes that mean "the database is not reachable or not accepting work right now".
_UNAVAILABLE_PREFIXES = ("08", "53", "57P")
# in_failed_sql_transaction: the session refuses every statement until its transaction is rolled
# back, so retrying on it can't help; a fresh connection (or a rollback) does.
_FAILED_TRANSACTION = "25P02"
_TIMEOUT_STATES = {"57014", "55P03"}  # query_canceled (statement_timeout), lock_not_available
_CONFLICT_PREFIX = "40"  # serialization_failure, deadlock_detected: retry the operation
# read_only_sql_transaction: a write reached a server that takes none (a standby, or a primary a
# failover tool is demoting: pg_auto_failover sets default_transaction_read_only on it). Another
# session may reach the new primary (a multi-host URL with target_session_attrs=read-write, or a
# failover endpoint whose address has moved): the session is dropped, like a broken one.
_READ_ONLY = "25006"


def translate(exc: DatabaseError) -> errors.StorageError:
    """The storage error for a database error, keeping the driver's error as ``__cause__``."""
    cause = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None) or ""
    message = str(exc).strip() or type(exc).__name__
    if sqlstate == "42P01" and "runnerq_" in message:  # undefined_table: one of ours, never migrated
        primary = getattr(getattr(cause, "diag", None), "message_primary", None) or message.splitlines()[0]
        error: errors.StorageError = errors.SchemaMissing(
            f"the RunnerQ tables are missing ({primary}): {errors.MIGRATE_HINT}"
        )
    elif sqlstate == "23505":  # unique_violation: an id (or key) that is already taken
        constraint = getattr(getattr(cause, "diag", None), "constraint_name", None) or "a unique key"
        error = errors.Conflict(f"already exists ({constraint}): {message}")
    elif sqlstate in _TIMEOUT_STATES:
        error = errors.Timeout(f"database timeout ({sqlstate}): {message}")
    elif sqlstate == _FAILED_TRANSACTION:
        error = errors.Unavailable(
            f"the database session is in a failed transaction ({sqlstate}); roll it back or reconnect: {message}"
        )
    elif sqlstate == _READ_ONLY:
        error = errors.Unavailable(
            f"the database server takes no writes now (a standby, or a primary being demoted); "
            f"a new session may reach the primary: {message}"
        )
    elif sqlstate.startswith(_CONFLICT_PREFIX):
        error = errors.Conflict(f"concurrent transaction conflict ({sqlstate}); retry: {message}")
    elif sqlstate.startswith(_UNAVAILABLE_PREFIXES) or (
        not sqlstate and isinstance(exc, (OperationalError, InterfaceError))
    ):
        error = errors.Unavailable(f"database unavailable: {message}")
    else:
        error = errors.Internal(f"unexpected database error ({sqlstate or type(exc).__name__}): {message}")
    error.__cause__ = cause
    return error


def drop_broken_connections(*, read_only: bool = False) -> None:
    """Close this thread's connections whose session died (a server restart, a failover) or, with
    ``read_only`` (a write was refused as read-only), that are on a server that takes no writes (a
    primary demoted by a failover, a standby), unless an
    ``atomic()`` block owns one (its owner must see the error), so the next operation opens a new
    one. Django only replaces a broken connection between requests (and its health check, a
    ``SELECT 1``, passes on a read-only server), so a process that serves none (a producer loop, a
    management command, a Celery worker) would otherwise get ``Unavailable`` on every later call,
    long after the new primary took over."""
    for connection in connections.all(initialized_only=True):
        raw = connection.connection
        dead = raw is not None and (raw.broken or (read_only and read_only_server(raw)))
        if dead and not connection.in_atomic_block:
            try:
                connection.close()
            except DatabaseError:
                connection.connection = None


def read_only_server(raw: Any) -> bool:
    """Whether the server of a psycopg connection said it takes no writes: a hot standby, or
    ``default_transaction_read_only`` on. PostgreSQL 14 and newer report both settings to the
    client whenever they change (a promotion, a reload), so this costs no round trip."""
    info = raw.info
    return "on" in (
        info.parameter_status("in_hot_standby"),
        info.parameter_status("default_transaction_read_only"),
    )


@contextmanager
def database_errors() -> Iterator[None]:
    try:
        yield
    except errors.StorageError:
        raise
    except DatabaseError as exc:
        raise storage_error(exc) from exc.__cause__ or exc


def storage_error(exc: DatabaseError) -> errors.StorageError:
    """The spec's error kind of a database error (``database_errors`` raises it ``from`` the
    driver's error); a broken connection is dropped first, for the next operation to reconnect."""
    error = translate(exc)
    if isinstance(error, errors.Unavailable):
        drop_broken_connections(read_only=getattr(error.__cause__, "sqlstate", None) == _READ_ONLY)
    return error


def operation(func: Callable[P, R]) -> Callable[P, R]:
    """Map database errors of a storage operation to the spec's error kinds (the signature stays
    the operation's, for type checkers too). ``database_errors`` as a try statement: the
    generator-based context manager cost more than the rest of this wrapper, per operation."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except errors.StorageError:
            raise
        except DatabaseError as exc:
            raise storage_error(exc) from exc.__cause__ or exc

    return wrapper
