"""Fixtures every test package shares. Real services only: Postgres (the configured server and
the embedded one) and Redis (skipped with a reason when none is reachable)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers import free_port, redis_reachable, server_major, start_redis_server, url_for, with_dbname

# Transactional tests end with a DELETE of the tables, not Django's TRUNCATE (tests/flush.py).
pytest_plugins = ["tests.flush"]


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """The admin tests create a user each (with a password, logged in by form in the browser
    tests): Django's default PBKDF2 takes ~0.5 s of CPU per password, the test project's
    hashing is not what they test, and MD5 hashes in microseconds."""
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How pytest-xdist shares the tests out (``--dist loadgroup``): each file whole to one process,
    as ``loadfile`` would, but the multi-process (``slow``) tests, which start workers of up to 16
    threads with a connection each, all to one process, one after the other. Two of them at once
    (one per xdist process) could pass the server's 100 connections."""
    for item in items:
        group = "processes" if item.get_closest_marker("slow") else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
