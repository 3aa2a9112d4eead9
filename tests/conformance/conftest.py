"""Fixtures of the conformance tests: per PostgreSQL server, one scratch database and one pair of
driver processes for the whole session (drivers keep no state but the queue/DSN, and every
scenario opens a fresh ``cf_`` queue, so scenarios share both)."""

from __future__ import annotations

import shlex
import sys
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from tests.conformance.runner import DriverProcess, EventValidator, driver_env
from tests.helpers import REPO, SPEC_DIR, scratch_database

# The mixed scenarios name drivers `go` and `ts`; two Python drivers stand in for them, so those
# scenarios still prove that two processes share a queue through the tables alone. `go` comes
# first, so it is the default driver.
DRIVER_NAMES = ("go", "ts")
DRIVER_COMMAND = f"{shlex.quote(sys.executable)} manage.py runnerq_driver"
SERVER_SLOTS = ("configured", "embedded")


@dataclass
class ConformanceServer:
    label: str  # pg15, pg18-embedded, ...
    dsn: str  # the scratch database the drivers open
    drivers: dict[str, DriverProcess]


@pytest.fixture(scope="session")
def conformance_events() -> EventValidator:
    return EventValidator(SPEC_DIR / "schema" / "postgres" / "events.schema.json")


@pytest.fixture(scope="session")
def conformance_servers(pg_servers):
    """``get(slot) -> ConformanceServer``, built on first use and torn down at the session's end."""
    built: dict[int, ConformanceServer] = {}
    with ExitStack() as stack:

        def get(slot: int) -> ConformanceServer:
            if slot >= len(pg_servers):
                pytest.skip(f"no {SERVER_SLOTS[slot]} server: the configured server is the embedded one")
            if slot not in built:
                label, server_url = pg_servers[slot]
                dsn = stack.enter_context(scratch_database(server_url, prefix="rq_conformance"))
                drivers = {}
                for name in DRIVER_NAMES:
                    driver = DriverProcess(name, DRIVER_COMMAND, env=driver_env(dsn), cwd=REPO).start()
                    stack.callback(driver.stop)
                    drivers[name] = driver
                built[slot] = ConformanceServer(label, dsn, drivers)
            return built[slot]

        yield get
