"""What a command checks before any work: the database answers and holds the RunnerQ tables.

A first run usually fails here (no server, a typo in the database name, migrations never
applied), and each of these is one line that says what to do, not a traceback. What restarting
can't fix (a database or role that does not exist, authentication refused, missing tables) exits
with status 78 (EX_CONFIG) like every other configuration error. A server that does not answer
(refused, timed out, starting up, too many clients) is an outage, not a mistake: the services
(``runworker``, ``runscheduler``) wait for it (``wait_for_database``, bounded by
``RUNNERQ['STARTUP_WAIT_SECONDS']``), and a command that gives up on it exits with status 69
(EX_UNAVAILABLE), which systemd's ``Restart=on-failure`` restarts. Only start-up is checked; a
running worker rides out outages with its retries.

Internal: not part of the public API.
"""

from __future__ import annotations

import functools
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.core.management.base import CommandError
from django.db import connections

from runnerq_django import conf
from runnerq_django.exceptions import RunnerQError
from runnerq_django.logs import log_event
from runnerq_django.storage import session
from runnerq_django.storage.errors import MIGRATE_HINT, SchemaMissing
from runnerq_django.worker.exit_status import EX_CONFIG, EX_UNAVAILABLE
from runnerq_django.worker.shutdown import ShutdownSignals

CONNECT_TIMEOUT_SECONDS = 5
FIRST_RETRY_SECONDS = 1.0  # the pause after the first failed attempt; it doubles after each one
MAX_RETRY_SECONDS = 10.0  # the longest pause: a server back up is found within this long

# What libpq (or psycopg, resolving a host name) says when the server is there but refuses this
# connection for good: restarting can't help. Anything else that fails a connection (refused,
# timed out, reset, "the database system is starting up", too many clients) is an outage worth
# waiting for. A failed connection has no SQLSTATE, only this text; a server whose messages are
# not in English (lc_messages) is waited for whatever it says, its reason in each log line.
REFUSED_FOR_GOOD = (
    "does not exist",  # database "x" does not exist; role "x" does not exist
    "authentication failed",  # password, peer, ident, GSSAPI ...
    "no pg_hba.conf entry",
    "pg_hba.conf rejects connection",
    "no password supplied",
    "is not permitted to log in",
    "permission denied for database",
    "SSL was required",
    "for connection option",  # invalid integer value "x" for connection option "port"
    # A name that does not resolve (a DNS outage says "Temporary failure in name resolution").
    "Name or service not known",
    "nodename nor servname provided",
)

logger = logging.getLogger("runnerq_django.management.preflight")

_P = ParamSpec("_P")
_R = TypeVar("_R")


class DatabaseUnreachable(RunnerQError):
    """The database does not exist or refuses the connection (status 78)."""


class DatabaseNotAnswering(DatabaseUnreachable):
    """The server does not answer, for now: an outage (status 69 when a command gives up)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason  # libpq's reason alone, e.g. "Connection refused"


def _address(alias: str) -> dict[str, str]:
    """The database's name, host and port (never the password), as log fields."""
    settings = connections[alias].settings_dict
    return {
        "database": str(settings.get("NAME")),
        "host": settings.get("HOST") or "the local socket",
        "port": str(settings.get("PORT") or "5432"),
    }


def _nodes(address: dict[str, str]) -> str | None:
    """``h1:p1, h2:p2`` for a multi-host setting (``HOST = "db1,db2"``, one port each or one for
    all: libpq's rule), None for one host."""
    hosts, ports = address["host"].split(","), address["port"].split(",")
    if len(hosts) < 2 or len(ports) not in (1, len(hosts)):
        return None
    return ", ".join(f"{h}:{p}" for h, p in zip(hosts, ports * len(hosts) if len(ports) == 1 else ports))


def _at(address: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The ``at ...`` of a log sentence and the fields it needs: ``host:port``, or each node of a
    multi-host setting (an extra ``nodes`` field; the one-host lines are unchanged)."""
    nodes = _nodes(address)
    return ("%(host)s:%(port)s", {}) if nodes is None else ("%(nodes)s", {"nodes": nodes})


def describe(alias: str) -> str:
    """``database "x" at host:port`` (never the password); ``at h1:p1, h2:p2`` for the nodes of a
    multi-host setting."""
    address = _address(alias)
    where = _nodes(address) or f"{address['host']}:{address['port']}"
    return f'database "{address["database"]}" at {where}'


def require_database(alias: str, *, tables: bool = True) -> None:
    """Raise :class:`DatabaseUnreachable` (:class:`DatabaseNotAnswering` for an outage) or
    :class:`SchemaMissing` with a one-line message."""
    connection = connections[alias]
    params = connection.get_connection_params()
    # A server that drops packets would otherwise hang libpq for as long as the OS lets it.
    params["connect_timeout"] = min(
        int(params.get("connect_timeout") or CONNECT_TIMEOUT_SECONDS), CONNECT_TIMEOUT_SECONDS
    )
    # Every backend's wrapper has its DB-API module as ``Database``; django-stubs leave it out.
    database = connection.Database  # type: ignore[attr-defined]
    try:
        database.connect(**params).close()
    except database.Error as exc:
        text = str(exc)
        reason = "; ".join(line.strip() for line in text.splitlines() if line.strip())
        message = f"can't connect to {describe(alias)}: {reason}"
        if isinstance(exc, database.OperationalError) and not any(m in text for m in REFUSED_FOR_GOOD):
            raise DatabaseNotAnswering(message, _gist(text)) from None
        raise DatabaseUnreachable(message) from None
    if tables:
        missing, expected = missing_tables(alias)
        if missing:
            which = "" if len(missing) == expected else f" ({', '.join(missing)})"
            raise SchemaMissing(
                f"the RunnerQ tables are missing from {describe(alias)}{which}: {MIGRATE_HINT}"
            )


def _gist(text: str) -> str:
    """libpq's reason without the address the log line names already: ``connection to server at
    "h", port 5432 failed: FATAL:  the database system is starting up`` -> ``the database system
    is starting up``."""
    # psycopg tries the hosts of a multi-host setting in turn and lists each one's failure as
    # "- host: 'h', port: 'p', hostaddr: ...: connection failed: ... failed: <reason>": each node
    # with its own reason (a node that is down, a standby "session is read-only").
    attempts = [
        f"{match[1]}:{match[2]}: {_reason(match[3])}"
        for match in re.finditer(
            r"^- host: '([^']*)', port: '([^']*)'.*?: (connection failed: .*)$", text, re.M
        )
    ]
    if len(attempts) > 1:
        return "; ".join(attempts)
    first = text.strip().splitlines()[0] if text.strip() else "no reason given"
    return _reason(first) or first


def _reason(line: str) -> str:
    return line.rpartition(" failed: ")[2].removeprefix("FATAL:").strip()


def wait_for_database(alias: str, *, tables: bool = True) -> None:
    """``require_database``, waiting while the server does not answer: tries again after 1 s,
    2 s, 4 s ... up to ``MAX_RETRY_SECONDS`` apart, one warning per failed attempt naming the
    server, the reason and the next try, for at most ``RUNNERQ['STARTUP_WAIT_SECONDS']`` (None:
    as long as it takes). A stop signal while it waits ends the process with status 0: nothing
    has started yet."""
    limit = _wait_limit()
    began = time.monotonic()
    attempt = 0
    stop = threading.Event()
    signals: ShutdownSignals | None = None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        while True:
            attempt += 1
            try:
                require_database(alias, tables=tables)
            except DatabaseNotAnswering as exc:
                waited = time.monotonic() - began
                if limit is not None and waited >= limit:
                    raise DatabaseNotAnswering(
                        f"can't connect to {describe(alias)} within RUNNERQ['STARTUP_WAIT_SECONDS'] "
                        f"({limit:g} s, {attempt} attempts): {exc.reason}",
                        exc.reason,
                    ) from None
                pause = min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** (attempt - 1))
                if limit is not None:
                    pause = min(pause, limit - waited)
                _log_attempt(alias, exc.reason, attempt, pause, waited, limit)
                if signals is None:
                    # A child of runworker --processes starts with the stop signals blocked
                    # until the worker's own handlers are in: here they must stop it at once.
                    signals = ShutdownSignals(lambda name: stop.set())
                    signals.install()
                if stop.wait(pause):
                    log_event(
                        logger,
                        logging.WARNING,
                        "database.wait_stopped",
                        "%(signal)s received while waiting for database %(database)r at %(host)s:%(port)s;"
                        " stopping before anything started",
                        **_address(alias),
                        signal=signals.received,
                    )
                    raise SystemExit(0) from None
                continue
            if attempt > 1:
                waited = time.monotonic() - began
                address = _address(alias)
                at, nodes = _at(address)
                log_event(
                    logger,
                    logging.INFO,
                    "database.answered",
                    f"Database %(database)r at {at} answered after %(attempts)s attempts in %(waited_s)s s",
                    **address,
                    attempts=attempt,
                    waited_s=round(waited, 1),
                    **nodes,
                )
            return
    finally:
        if signals is not None:
            signals.restore()
            # Blocked again if they were: the worker unblocks them once its handlers are in.
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _log_attempt(
    alias: str, reason: str, attempt: int, pause: float, waited: float, limit: float | None
) -> None:
    address = _address(alias)
    at, nodes = _at(address)
    log_event(
        logger,
        logging.WARNING,
        "database.unreachable",
        f"Database %(database)r at {at} is unreachable (%(reason)s); next try in"
        " %(next_try_s)s s (attempt %(attempt)s, %(gives_up)s)",
        **address,
        reason=reason,
        attempt=attempt,
        next_try_s=round(pause, 1),
        waited_s=round(waited, 1),
        gives_up="waiting as long as it takes" if limit is None else f"giving up in {limit - waited:.1f} s",
        **nodes,
    )


def _wait_limit() -> float | None:
    """``RUNNERQ['STARTUP_WAIT_SECONDS']``, refused at once when it is not a valid value (the
    system checks, which would say so too, only run once the database answers)."""
    key = "STARTUP_WAIT_SECONDS"
    value = conf.get(key)
    problem = conf.rule(key).problem(value, f"RUNNERQ[{key!r}]")
    if problem:
        raise CommandError(problem, returncode=EX_CONFIG)
    return value  # type: ignore[no-any-return]


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


def one_line_errors(handle: Callable[_P, _R]) -> Callable[_P, _R]:
    """A command's ``handle`` whose first-run errors end it with their message and status 78,
    or 69 for a server that does not answer."""

    @functools.wraps(handle)
    def wrapper(*args: _P.args, **options: _P.kwargs) -> _R:
        try:
            return handle(*args, **options)
        except DatabaseNotAnswering as exc:
            raise CommandError(str(exc), returncode=EX_UNAVAILABLE) from None
        except (DatabaseUnreachable, SchemaMissing) as exc:
            raise CommandError(str(exc), returncode=EX_CONFIG) from None

    return wrapper
