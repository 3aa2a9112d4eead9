"""Schema-test fixtures: one migrated template database per server, cloned per test."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.helpers import manage, scratch_database


@pytest.fixture(scope="session")
def migrated_templates(pg_servers) -> list[tuple[str, str, str]]:
    """``(label, server_url, template_name)`` per server: a database ``migrate`` built once, to
    clone (``support.clone_of``) for tests that start from a migrated database."""
    with ExitStack() as stack:
        templates = []
        for label, server in pg_servers:
            url = stack.enter_context(scratch_database(server, prefix="rq_template"))
            manage("migrate", "--no-input", db_url=url)
            templates.append((label, server, conninfo_to_dict(url)["dbname"]))
        yield templates
