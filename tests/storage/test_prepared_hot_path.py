"""The worker's hot statements (claim, COMPLETE then WAKE) run as server-side prepared
statements, COMPLETE and WAKE in one round trip (psycopg's pipeline mode) and one transaction:
committed together, rolled back together, each statement seeing what the one before wrote."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test import override_settings

from runnerq_django import storage
from runnerq_django.logs import event_of
from runnerq_django.storage import NewActivity, db
from runnerq_django.storage.sql import claims as sql
from runnerq_django.worker import db as worker_db
from runnerq_django.worker.db import plan_claims_generically
from runnerq_django.worker.dispatcher import Dispatcher

TABLE = "rq_test_pipeline"


def _prepared(fragment: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{fragment}%"]
        )
        return cursor.fetchone()[0]


@pytest.fixture
def table():
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {TABLE} (x int)")
        cursor.execute(f"TRUNCATE {TABLE}")
    yield TABLE


def _count() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE}")
        return cursor.fetchone()[0]


def test_statements_of_one_round_trip_see_each_other_and_commit_together(table):
    rows = db.fetch_in_one_transaction_prepared(
        "default",
        [f"INSERT INTO {table} VALUES (%(x)s) RETURNING x", f"SELECT count(*) FROM {table}"],
        {"x": 7},
    )
    assert rows == [[(7,)], [(1,)]]
    assert _count() == 1


def test_a_failing_statement_rolls_back_the_ones_before_it_and_leaves_the_session_usable(table):
    with pytest.raises(Exception, match="division by zero"):
        db.fetch_in_one_transaction_prepared(
            "default", [f"INSERT INTO {table} VALUES (%(x)s)", "SELECT 1 / %(zero)s"], {"x": 1, "zero": 0}
        )
    assert _count() == 0  # not committed: the insert went with the failed statement
    assert db.fetch_one("default", "SELECT 1") == (1,)  # no transaction left open in failure


def test_inside_the_callers_transaction_they_roll_back_with_it(table):
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        db.fetch_in_one_transaction_prepared("default", [f"INSERT INTO {table} VALUES (%(x)s)"], {"x": 1})
        assert _count() == 1
        raise Undo
    assert _count() == 0


def test_claim_and_complete_are_prepared_once_per_connection(queue):
    for i in range(6):
        storage.submit(queue, NewActivity(activity_type="t", payload={"i": i}))
    for _ in range(3):
        [claimed] = storage.claim(queue, types=["t"], limit=1, worker_id="w")
        assert storage.complete_many(queue, [(claimed.claim, {"ok": True})]) == []
    for _ in range(3):  # two types: a walk per type
        [claimed] = storage.claim(queue, types=["t", "u"], limit=1, worker_id="w")
        storage.complete(queue, claimed.claim, None)
    assert _prepared("SET status = 'processing'") == 2  # each claim shape, once (one type, two)
    assert _prepared(") w1") == 1  # the two-type claim (a walk per type)
    assert _prepared("jsonb_to_recordset") == 1  # COMPLETE
    assert _prepared("woken_parents") == 1  # WAKE
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_results WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 6


@pytest.mark.parametrize("types", [["t"], ["t", "u"], [f"t{i}" for i in range(20)]], ids=["1", "2", "20"])
def test_every_claim_shape_settles_on_the_generic_plan(queue, types):
    """Postgres plans a prepared statement anew (a custom plan) until its generic plan looks no
    costlier. A claim planned on every call cost a two-type idle claim 0.96 ms instead of 0.39
    here: nothing the planner can see may make the generic plan look costlier (the types and the
    fallback's array are sub-SELECTs)."""
    # A queue that has run a while (on a table of a dozen rows, reading every input beats
    # looking them up, and the plans differ for real).
    storage.submit_many(queue, [NewActivity(activity_type=types[0], payload={"i": i}) for i in range(500)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runnerq_activities, runnerq_inputs")
    for _ in range(12):
        [claimed] = storage.claim(queue, types=types, limit=1, worker_id="w")
        storage.complete(queue, claimed.claim, None)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%SET status = 'processing'%", "%LIMIT 1%"],
        )
        [(generic, custom)] = cursor.fetchall()
    assert generic >= 6 and custom <= 6, (generic, custom)


@pytest.fixture
def fresh_session_marks(monkeypatch):
    """The worker marks a session once it set it up (per thread and connection); the test's
    transaction rolls its SET back, so a mark left by an earlier test would be wrong here."""
    monkeypatch.setattr(worker_db, "_generic", threading.local())
    monkeypatch.setattr(worker_db, "_relaxed", threading.local())
    monkeypatch.setattr(worker_db, "_no_jit", threading.local())


def test_the_dispatchers_claims_run_the_generic_plan_for_an_idle_queue_beside_a_busy_one(
    queue, fresh_session_marks
):
    """Beside a busy queue, the generic plan of a claim expects a full batch and the custom plan
    of an idle queue one row: Postgres kept the custom plan and planned every claim anew (an
    idle one-row claim 1.57 ms instead of 0.78 after bench/throughput.py's backlogs). The
    dispatcher's session runs the generic plan, always (worker.db.plan_claims_generically)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runnerq_activities (id, queue_name, activity_type, status, root_activity_id)
            SELECT gen_random_uuid(), %s, 't', 'pending', NULL FROM generate_series(1, 20000)
        """,
            [queue + "_busy"],
        )
    storage.submit_many(queue, [NewActivity(activity_type="t", payload={"i": i}) for i in range(12)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runnerq_activities, runnerq_inputs")
    plan_claims_generically("default")
    for _ in range(12):
        [claimed] = storage.claim(queue, types=["t"], limit=1, worker_id="w")
        storage.complete(queue, claimed.claim, None)
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%SET status = 'processing'%", "%LIMIT 1%"],
        )
        assert cursor.fetchall() == [(12, 0)]


@pytest.mark.parametrize(("limits", "mode"), [({}, "force_generic_plan"), ({"t": 2}, "auto")])
def test_a_dispatcher_with_limited_types_leaves_the_plans_to_postgres(
    queue, fresh_session_marks, limits, mode
):
    """The limited types' claims are prepared on the same session, and their generic plans cost
    the limited burn-down nearly twice the Postgres CPU (bench/flow_burndown.py)."""
    dispatcher = Dispatcher(
        queues=[queue],
        types=["t", "u"],
        pool=None,
        limits=limits,
        attempts=None,
        alias="default",
        worker_id="w",
        lease_ms=30_000,
        poll_interval=1.0,
        wakeups=None,
        stop=threading.Event(),
    )
    assert dispatcher.claim_round(8) is False  # nothing to claim
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == mode
        cursor.execute("SHOW jit")  # never JIT-compiled, limited or not (worker.db.claim_without_jit)
        assert cursor.fetchone()[0] == "off"


def test_a_worker_that_cant_turn_jit_off_says_so_when_it_is_on(caplog):
    """Behind PgBouncer in transaction pooling the dispatcher sets nothing on its session: the
    worker warns, at its start, when the server would JIT-compile its claims."""
    with connection.cursor() as cursor:
        cursor.execute("SET jit TO on")
    with caplog.at_level("WARNING", logger="runnerq_django.worker"):
        worker_db.warn_when_jit_is_on("default")
    assert "runnerq.worker.jit_on" in map(event_of, caplog.records)
    caplog.clear()
    with connection.cursor() as cursor:
        cursor.execute("SET jit TO off")  # as ALTER ROLE ... SET jit = off makes it
    with caplog.at_level("WARNING", logger="runnerq_django.worker"):
        worker_db.warn_when_jit_is_on("default")
    assert "runnerq.worker.jit_on" not in map(event_of, caplog.records)


def test_the_claims_bounds_are_literals_one_statement_per_bound(queue):
    statement, params = storage.claim_statement(queue, types=["t"], limit=17, worker_id="w")
    assert "%(limit)s" not in statement and "LIMIT 17" in statement and params["limit"] == 17
    statement, _ = storage.claim_statement(queue, types=["t", "u"], limit=800, worker_id="w")
    assert (
        "%(candidates)s" not in statement
        and f"LIMIT {800 + storage.attempts.CANDIDATES_BEYOND_LIMIT}" in statement
    )
    with pytest.raises(TypeError, match="limit must be an int"):
        sql.with_bounds("LIMIT %(limit)s", {"limit": "1; DROP TABLE x"})


@override_settings(RUNNERQ={"PREPARED_STATEMENTS": False})
def test_without_prepared_statements_they_are_one_off_statements_with_the_same_effect(queue, table):
    storage.submit(queue, NewActivity(activity_type="t", payload=1))
    [claimed] = storage.claim(queue, types=["t"], worker_id="w")
    storage.complete(queue, claimed.claim, 2)
    assert storage.complete_many(queue, [(claimed.claim, 2)]) == []  # a lost reply's repeat
    assert _prepared("jsonb_to_recordset") == 0 and _prepared("SET status = 'processing'") == 0
    assert db.fetch_in_one_transaction_prepared(
        "default",
        [f"INSERT INTO {table} VALUES (%(x)s) RETURNING x", f"SELECT count(*) FROM {table}"],
        {"x": 1},
    ) == [[(1,)], [(1,)]]


def _django_loader():
    import psycopg
    from psycopg.pq import Format

    oid = psycopg.postgres.types["timestamptz"].oid
    with connection.cursor() as cursor:
        return cursor.cursor.adapters.get_loader(oid, Format.TEXT)(oid, cursor.cursor)


def _texts(zone: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SET TIME ZONE '{zone}'")
        try:
            cursor.execute(
                "SELECT (timestamptz '2026-12-02 02:43:25.123456+00' + g * interval '37.123457 minutes'"
                " - interval '900 years' * (g % 3))::text FROM generate_series(0, 500) g"
            )
            return [row[0] for row in cursor.fetchall()]
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
def test_claimed_timestamps_decode_as_djangos_loader_decodes_them(zone):
    """The claim's timestamps come as text (storage.decode); the fast path for UTC texts must
    give exactly what Django's loader gives (value and tzinfo), and leave the rest to it."""
    load, django_load = db.timestamptz_loader("default"), _django_loader()
    texts = [*_texts(zone), "2026-12-02 02:43:25+00", "2026-12-02 02:43:25.1+00", "0001-01-01 00:00:00+00"]
    for text in texts:
        ours, theirs = load(text), django_load.load(text.encode())
        assert (ours, ours.replace(tzinfo=None), ours.tzinfo) == (
            theirs,
            theirs.replace(tzinfo=None),
            theirs.tzinfo,
        ), text
    for text in ["infinity", "10000-01-01 00:00:00+00", "0044-03-15 00:00:00+00 BC"]:
        with pytest.raises(ValueError, match="timestamp too"):
            load(text)


def test_named_placeholders_become_numbers_once_per_statement():
    text, names = db.positional("SELECT %(a)s, %(b)s, %(a)s, 'x%%y' LIKE '%%'")
    assert text == b"SELECT $1, $2, $1, 'x%y' LIKE '%'" and names == ("a", "b")
    assert db.positional("SELECT %(a)s") is db.positional("SELECT %(a)s")  # converted once
    assert db.positional("SELECT %(ids)b::uuid[]") is None  # binary: psycopg's own conversion


def test_a_statement_past_psycopgs_query_cache_runs_prepared_by_number(table):
    """psycopg caches the conversion of a query's placeholders up to 4,096 bytes; the claims of
    several types are longer, so they go by number (db.positional), prepared all the same."""
    padding = "/*" + "-" * 5000 + "*/"
    statement = f"SELECT %(x)s::int + %(y)s::int + %(x)s::int {padding}"
    for _ in range(2):
        assert db.fetch_all_prepared("default", statement, {"x": 2, "y": 3}) == [(7,)]
    assert _prepared("SELECT $1::int + $2::int + $1::int") == 1
    # and a statement with a binary parameter, by psycopg's conversion
    assert db.fetch_all_prepared("default", "SELECT cardinality(%(a)b::int4[])", {"a": [1, 2]}) == [(2,)]
