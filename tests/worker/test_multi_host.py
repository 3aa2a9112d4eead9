"""A multi-host database setting (``HOST = "db1,db2"`` with ``target_session_attrs``, what an HA
formation's URL gives): the start-up wait names every node, and each node's own reason, when
none will do (docs/how-to/high-availability.md)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from runnerq_django.management import preflight
from tests.helpers import free_port


def test_the_reason_of_a_multi_host_failure_names_each_node(live_db_url):
    """A node that is down and one that is up but not what ``target_session_attrs`` asks for
    (here the test's primary, asked for a standby: a failover's promoted node while it is still
    read-only says "session is read-only" the same way)."""
    params = psycopg.conninfo.conninfo_to_dict(live_db_url)
    closed = free_port()
    host = params.get("host") or "127.0.0.1"
    url = psycopg.conninfo.make_conninfo(
        **{**params, "host": f"127.0.0.1,{host}", "port": f"{closed},{params.get('port') or 5432}"},
        target_session_attrs="standby",
        connect_timeout=2,
    )
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(url).close()
    gist = preflight._gist(str(refused.value))
    assert gist.startswith(f"127.0.0.1:{closed}: Connection refused; "), gist
    assert gist.endswith("server is not in hot standby mode"), gist
    # One host: the reason alone, as before.
    with pytest.raises(psycopg.OperationalError) as one:
        psycopg.connect(host="127.0.0.1", port=closed, connect_timeout=2).close()
    assert preflight._gist(str(one.value)) == "Connection refused"


@pytest.mark.django_db
def test_the_database_is_described_node_by_node(monkeypatch):
    settings = connection.settings_dict
    monkeypatch.setitem(settings, "HOST", "db1.internal,db2.internal")
    monkeypatch.setitem(settings, "PORT", "5432,5433")
    name = settings["NAME"]
    assert preflight.describe("default") == f'database "{name}" at db1.internal:5432, db2.internal:5433'
    monkeypatch.setitem(settings, "PORT", "6432")
    assert preflight.describe("default") == f'database "{name}" at db1.internal:6432, db2.internal:6432'
    monkeypatch.setitem(settings, "HOST", "db1.internal")
    assert preflight.describe("default") == f'database "{name}" at db1.internal:6432'


@pytest.mark.django_db
def test_the_start_up_wait_line_names_each_node(monkeypatch, caplog):
    settings = connection.settings_dict
    monkeypatch.setitem(settings, "HOST", "db1.internal,db2.internal")
    monkeypatch.setitem(settings, "PORT", "5432,5433")
    reason = "db1.internal:5432: Connection refused; db2.internal:5433: session is read-only"
    with caplog.at_level("WARNING", logger="runnerq_django.management.preflight"):
        preflight._log_attempt("default", reason, 2, 2.0, 1.0, None)
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "database.unreachable"]
    assert "at db1.internal:5432, db2.internal:5433 is unreachable" in record.getMessage()
    assert record.nodes == "db1.internal:5432, db2.internal:5433" and record.reason == reason
    # One host: the line as it always was, with no nodes field.
    monkeypatch.setitem(settings, "HOST", "db1.internal")
    monkeypatch.setitem(settings, "PORT", "5432")
    caplog.clear()
    with caplog.at_level("WARNING", logger="runnerq_django.management.preflight"):
        preflight._log_attempt("default", "Connection refused", 1, 1.0, 0.0, None)
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "database.unreachable"]
    assert "at db1.internal:5432 is unreachable (Connection refused)" in record.getMessage()
    assert not hasattr(record, "nodes")
