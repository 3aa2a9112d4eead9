"""The high-availability how-to's DATABASES snippet works as printed: every OPTIONS name is a
libpq parameter, and with one node down the connection goes on to the next that takes writes."""

from __future__ import annotations

import os
import socket

import psycopg
from django.db.backends.postgresql.base import DatabaseWrapper

from tests.docs.test_howto_snippets import code_blocks
from tests.helpers import free_port


def test_the_databases_snippet_connects_past_a_node_that_is_down(live_db_url):
    (snippet,) = [
        block for block in code_blocks("how-to/high-availability.md", "python") if "DATABASES = {" in block
    ]
    scope: dict = {}
    exec(snippet, scope)
    entry = scope["DATABASES"]["default"]
    assert entry["OPTIONS"]["target_session_attrs"] == "read-write"
    assert len(entry["HOST"].split(",")) == len(entry["PORT"].split(","))
    # The printed nodes replaced by a closed port and the test's server (its name, user, password).
    real = psycopg.conninfo.conninfo_to_dict(live_db_url)
    entry = {
        **entry,
        "NAME": real["dbname"],
        "USER": real.get("user", ""),
        "PASSWORD": real.get("password", ""),
        "HOST": f"127.0.0.1,{real.get('host') or '127.0.0.1'}",
        "PORT": f"{free_port()},{real.get('port') or 5432}",
    }
    wrapper = DatabaseWrapper({**_defaults(), **entry}, alias="ha_snippet")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT NOT pg_is_in_recovery()")
            assert cursor.fetchone()[0]
        # libpq set the keepalives on its socket: the names are its own (a misspelt one fails
        # the connection with "invalid connection option").
        sock = socket.socket(fileno=os.dup(wrapper.connection.fileno()))
        try:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            assert idle == entry["OPTIONS"]["keepalives_idle"]
        finally:
            sock.close()  # the duplicate only: the connection keeps its own
        assert wrapper.connection.info.port == int(entry["PORT"].split(",")[1])
    finally:
        wrapper.close()


def _defaults() -> dict:
    from django.db import connections

    settings = dict(connections["default"].settings_dict)
    for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS"):
        settings.pop(key, None)
    return settings
