"""Fixtures every test package shares. Real services only: Postgres (the configured server and
the embedded one) and Redis (skipped with a reason when none is reachable)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests import pgbouncer
from tests.helpers import free_port, redis_reachable, server_major, start_redis_server, url_for, with_dbname

# Transactional tests end with a DELETE of the tables, not Django's TRUNCATE (tests/flush.py).
pytest_plugins = ["tests.flush"]


def _keep_pgbouncer_settings(setting, value, enter, **kwargs) -> None:
    """Behind PgBouncer, a test's ``override_settings(RUNNERQ={...})`` (a whole new dict) keeps
    the settings transaction pooling needs (``testproject/settings.py``) unless it names them:
    a test that needs ``LISTEN`` or prepared statements is marked ``direct_postgres``."""
    if setting == "RUNNERQ" and enter and isinstance(value, dict):
        value.setdefault("LISTEN", False)
        value.setdefault("PREPARED_STATEMENTS", os.environ.get(pgbouncer.ENV_PREPARED) == "1")


if os.environ.get(pgbouncer.ENV_URL):
    from django.test.signals import setting_changed

    # runnerq_django.conf rebuilds its view of the settings lazily, after every receiver ran.
    setting_changed.connect(_keep_pgbouncer_settings, dispatch_uid="tests.pgbouncer")


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """The admin tests create a user each (with a password, logged in by form in the browser
    tests): Django's default PBKDF2 takes ~0.5 s of CPU per password, the test project's
    hashing is not what they test, and MD5 hashes in microseconds."""
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(autouse=True)
def recursion_limit_unchanged():
    """Where Python's JSON parser stops depends on sys.getrecursionlimit(), and tests of deep values
    rely on the default: a test that changes it (mypy's in-process run did) fails here, by name,
    instead of a later test in the same process failing for no visible reason."""
    limit = sys.getrecursionlimit()
    yield
    assert sys.getrecursionlimit() == limit, (
        f"the test left sys.getrecursionlimit() at {sys.getrecursionlimit()}"
    )


SECOND = "second"  # the alias of the second database the several-databases tests use (tests/multidb)


def _asks_for_second(items) -> bool:
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is not None and SECOND in (marker.kwargs.get("databases") or ()):
            return True
    return False


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, request) -> None:
    """pytest-django's hook before it creates the test databases: when a collected test asks for
    the ``second`` alias (``@pytest.mark.django_db(databases=["default", "second"])``), add it,
    on the embedded PostgreSQL 18 (another server, another major than CI's 15; the same embedded
    server, another database, when that is the configured one too). pytest-django then creates
    and migrates its test database like the default's. Runs that collect no such test never
    start the embedded server for it."""
    if not _asks_for_second(request.session.items):
        return
    from django.conf import settings
    from django.db import connections

    from testproject.database import django_database, embedded_url

    entry = django_database(embedded_url("postgres"))
    entry["TEST"] = {"NAME": f"test_runnerq_second_{os.getpid()}"}
    settings.DATABASES[SECOND] = entry
    connections.settings[SECOND] = connections.configure_settings(
        {"default": connections.settings["default"], SECOND: entry}
    )[SECOND]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and behind PgBouncer (``RUNNERQ_TEST_PGBOUNCER``, see
    ``tests/pgbouncer.py``) the tests' connections moved onto it once the database exists.

    The database is created, migrated and dropped past the pooler, on ``DATABASE_URL``'s server,
    as docs/how-to/pgbouncer.md says to deploy: migrations hold the spec's *session* advisory lock,
    which transaction pooling can't keep. Every connection made after this fixture (the tests'
    own, and through ``live_db_url`` the processes they start) goes through PgBouncer."""
    bouncer = os.environ.get(pgbouncer.ENV_URL)
    if not bouncer:
        yield
        _close_the_shared_sync_threads_connections()
        return
    from django.db import connections
    from psycopg.conninfo import conninfo_to_dict

    target = conninfo_to_dict(bouncer)
    direct = {}
    for conn in connections.all():
        conn.close()
        # The settings dict is shared by every thread's connection of the alias.
        direct[conn.alias] = (conn.settings_dict["HOST"], conn.settings_dict["PORT"])
        conn.settings_dict["HOST"], conn.settings_dict["PORT"] = target["host"], str(target["port"])
    yield
    _close_the_shared_sync_threads_connections()
    with django_db_blocker.unblock():
        for conn in connections.all():
            conn.close()
            conn.settings_dict["HOST"], conn.settings_dict["PORT"] = direct[conn.alias]
            # PgBouncer keeps idle server connections to the test database, which would make
            # its DROP DATABASE fail ("being accessed by other users").
            with conn._nodb_cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    [conn.settings_dict["NAME"]],
                )


def _close_the_shared_sync_threads_connections() -> None:
    """``aenqueue()`` outside a request runs on asgiref's one shared sync thread, whose Django
    connections stay open (Django closes them when a request ends, and there is none here): the
    test database's DROP would fail ("being accessed by other users") and leave it behind."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())


@pytest.fixture(scope="session")
def pg_servers(django_db_setup) -> list[tuple[str, str]]:
    """``(label, url)`` of every PostgreSQL server the schema and conformance tests run on:
    the configured one and, when that is not it, the embedded PostgreSQL 18."""
    from django.db import connection

    from testproject.database import embedded_url, is_embedded

    configured = with_dbname(url_for(connection.settings_dict), "postgres")
    servers = [(f"pg{server_major(configured)}", configured)]
    if not is_embedded():
        embedded = embedded_url("postgres")
        servers.append((f"pg{server_major(embedded)}-embedded", embedded))
    return servers


@pytest.fixture
def live_db_url(transactional_db) -> str:
    """The URL of the test database, for processes a test starts (workers, drivers, commands)."""
    from django.db import connection

    return url_for(connection.settings_dict)


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if not redis_reachable(url):
        pytest.skip(f"no Redis reachable at {url} (set REDIS_URL); the Redis tests need a real server")
    return url


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of the test's own on a free port, for tests that stop or flush it."""
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed; tests that stop or flush Redis need their own server")
    port = free_port()
    proc = start_redis_server(binary, port, tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    yield {"url": url, "port": port, "process": proc, "dir": tmp_path, "binary": binary}
    proc.kill()
    proc.wait()


# tryfirst: xdist's own hook turns the xdist_group marks into the groups it shares out, and a
# conftest loaded before xdist's worker plugin would otherwise run after it (its marks unseen).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How pytest-xdist shares the tests out (``--dist loadgroup``): each file whole to one process,
    as ``loadfile`` would, but the multi-process (``slow``) tests, which start workers of up to 16
    threads with a connection each, all to one process, one after the other. Two of them at once
    (one per xdist process) could pass the server's 100 connections.

    Behind PgBouncer's transaction pooling (``RUNNERQ_TEST_PGBOUNCER``), the tests marked
    ``direct_postgres("why")`` are skipped, with their reason."""
    behind = os.environ.get(pgbouncer.ENV_URL)
    for item in items:
        marker = item.get_closest_marker("direct_postgres")
        if marker is not None:
            if len(marker.args) != 1 or not marker.args[0]:
                raise pytest.UsageError(
                    f"{item.nodeid}: direct_postgres needs its reason: direct_postgres('why')"
                )
            if behind:
                item.add_marker(
                    pytest.mark.skip(reason=f"behind PgBouncer transaction pooling: {marker.args[0]}")
                )
        group = "processes" if item.get_closest_marker("slow") else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
