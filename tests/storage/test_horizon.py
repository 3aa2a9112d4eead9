"""The xmin horizon (``storage.horizon``): a real transaction held open in another connection is
found with its pid, application name and state by the storage read, ``runnerq_status`` (text and
``--json``) and the worker's gauges (the admin's overview and live console:
tests/admin/test_horizon_console.py); once it ends it is
gone. A role without ``pg_read_all_stats`` sees another role's holder by its age in transactions only
(its state and times hidden), and counts those sessions."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import call_command
from django.test import override_settings

from runnerq_django import metrics
from runnerq_django.storage import errors
from runnerq_django.storage import horizon as horizons
from runnerq_django.storage.sql import horizon as q
from runnerq_django.worker import gauges
from tests.helpers import wait_until


@pytest.fixture
def held(live_db_url) -> Iterator[psycopg.Connection]:
    """A session of the test database in REPEATABLE READ that has read (its snapshot taken) and
    sits idle in its transaction."""
    name = f"rq-held-{uuid.uuid4().hex[:8]}"
    conn = psycopg.connect(live_db_url, application_name=name)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute("SELECT count(*) FROM runnerq_activities").fetchone()
    try:
        yield conn
    finally:
        conn.close()


def _mine(found: horizons.Horizon, conn: psycopg.Connection) -> horizons.HorizonHolder | None:
    return next((h for h in found.holders if h.pid == conn.info.backend_pid), None)


def test_a_held_snapshot_is_found_with_its_pid_name_and_state(held):
    found = horizons.horizon("default", limit=1000)
    holder = _mine(found, held)
    assert holder is not None
    assert holder.kind == "session"
    assert holder.name == held.info.parameter_status("application_name")
    assert holder.state == "idle in transaction"
    assert holder.backend_type == "client backend" and holder.role
    assert holder.seconds is not None and holder.seconds >= 0 and holder.xid_age >= 0
    # Held back once older than the threshold given; not before.
    assert holder.held(0) and not holder.held(3600)
    assert found.age_xids >= holder.xid_age and found.age_seconds >= holder.seconds
    held.rollback()  # the transaction ends: its snapshot goes with it
    assert _mine(horizons.horizon("default", limit=1000), held) is None


def test_a_transaction_that_wrote_holds_it_with_its_transaction_id(live_db_url):
    # READ COMMITTED, idle in transaction after a write: no snapshot kept, but its xid holds
    # the horizon all the same.
    with psycopg.connect(live_db_url, application_name="rq-held-xid") as conn:
        conn.execute("SELECT pg_current_xact_id()").fetchone()
        holder = _mine(horizons.horizon("default", limit=1000), conn)
        assert holder is not None and holder.state == "idle in transaction"
        conn.rollback()


def test_bad_arguments_name_the_field_and_the_limit(transactional_db):
    with pytest.raises(errors.InvalidArgument, match=r"^limit: must be 1\.\.1000, got 0$"):
        horizons.horizon("default", limit=0)
    with pytest.raises(errors.InvalidArgument, match=r"^held_seconds: must be a number"):
        horizons.horizon("default", held_seconds=float("nan"))


@override_settings(RUNNERQ={"HORIZON_HELD_SECONDS": 1})
def test_runnerq_status_reports_the_holder_in_text_and_json(held):
    wait_until(lambda: _mine(horizons.horizon("default", limit=1000), held).seconds >= 1.5, timeout=30)
    out = io.StringIO()
    call_command("runnerq_status", "--json", stdout=out)
    doc = json.loads(out.getvalue())["xmin_horizon"]["default"]
    assert doc["held"] is True and doc["held_seconds"] == 1
    mine = [h for h in doc["holders"] if h["pid"] == held.info.backend_pid]
    assert mine and mine[0]["state"] == "idle in transaction" and mine[0]["held"] is True
    assert mine[0]["name"] == held.info.parameter_status("application_name")
    text = io.StringIO()
    call_command("runnerq_status", stdout=text)
    assert "xmin horizon: HELD BACK by session" in text.getvalue()
    held.rollback()
    after = io.StringIO()
    call_command("runnerq_status", "--json", stdout=after)
    pids = [h["pid"] for h in json.loads(after.getvalue())["xmin_horizon"]["default"]["holders"]]
    assert held.info.backend_pid not in pids


def test_the_gauges_carry_its_age(held):
    previous = metrics.get_sink()
    metrics.set_sink(metrics.NoopSink())
    try:
        held.execute("SELECT pg_sleep(0.2)")  # its transaction is at least that old
        gauges.report_horizon("default")
        age = metrics.gauge_value("xmin_horizon_age_seconds", database="default")
        assert age is not None and age >= 0.2
        assert metrics.gauge_value("xmin_horizon_age_xids", database="default") is not None
    finally:
        metrics.set_sink(previous)


def test_a_role_without_read_all_stats_counts_what_it_cannot_see(held, live_db_url):
    role = f"rq_plain_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(live_db_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        plain_url = live_db_url.replace("postgres@", f"{role}@", 1)
        with psycopg.connect(plain_url, autocommit=True) as plain:
            rows = plain.execute(q.HOLDERS, {"limit": 1000}).fetchall()
            # Listed by its age in transactions (visible to any role), its state and time hidden.
            (mine,) = [row for row in rows if row[3] == held.info.backend_pid]
            assert mine[0] == "session" and mine[5] == "hidden" and mine[2] is None and mine[1] >= 0
            (hidden,) = plain.execute(q.HIDDEN_SESSIONS).fetchone()
            assert hidden >= 1
    finally:
        with psycopg.connect(live_db_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")
