"""The scheduler's storage operations (``runnerq_django.storage.periodic``), on real Postgres, and
the rule that the scheduler runs no SQL of its own (ARCHITECTURE.md: one place for SQL)."""

from __future__ import annotations

import ast
import re
import threading
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection, connections

from runnerq_django import client
from runnerq_django.storage import errors
from runnerq_django.storage import periodic as store
from tests.helpers import docstring_ids
from tests.scheduler.conftest import T0

REPO = Path(__file__).resolve().parents[2]
# cacheio.py reads and writes the *cache's* storage raw so that no record is ever unpickled: Django's
# cache table through storage.cache_table, and a redis pipeline, whose execute() sends redis commands
# (the one `.execute` allowed below: on a name `pipe`).
SCHEDULER_SOURCES = [
    *sorted((REPO / "runnerq_django" / "scheduler").glob("*.py")),
    REPO / "runnerq_django" / "management" / "commands" / "runscheduler.py",
    REPO / "runnerq_django" / "management" / "commands" / "runnerq_schedule.py",
]
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM)\b.*\b(FROM|SET|VALUES|WHERE|RETURNING)\b", re.S)


def test_the_scheduler_runs_no_sql_of_its_own():
    assert not (REPO / "runnerq_django" / "scheduler" / "sql.py").exists()
    offences = []
    for path in SCHEDULER_SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        docstrings = docstring_ids(tree)
        for node in ast.walk(tree):
            redis_pipeline = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (path.name, node.value.id, node.attr) == ("cacheio.py", "pipe", "execute")
            )
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("execute", "executemany", "cursor", "raw")
                and not redis_pipeline
            ):
                offences.append(f"{path.name}:{node.lineno} .{node.attr}")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and SQL.search(node.value)
            ):
                offences.append(f"{path.name}:{node.lineno} SQL text")
    assert offences == []


def test_lease_acquire_renew_precedence_force_and_release(transactional_db, namespace):
    first = store.acquire_lease(namespace, "node-a", 1, 30)
    assert first is not None
    assert store.acquire_lease(namespace, "node-a", 1, 30) == first  # renewal keeps the token
    assert store.acquire_lease(namespace, "node-b", 1, 30) is None  # same release: refused
    higher = store.acquire_lease(namespace, "node-c", 2, 30)  # a higher release takes it at once
    assert higher is not None and higher != first
    assert not store.holds_lease(store.Fence(namespace, "node-a", first))
    forced = store.force_lease(namespace, "node-a", 1, 30)  # an operator's takeover
    assert forced not in (first, higher)
    state = store.read_lease(namespace)
    assert (state.owner, state.release, state.token, state.held) == ("node-a", 1, forced, True)
    assert store.release_lease(store.Fence(namespace, "node-a", forced))
    assert not store.release_lease(store.Fence(namespace, "node-a", forced - 1))
    assert not store.read_lease(namespace).held
    assert store.acquire_lease(namespace, "node-b", 0, 30) is not None  # released: anyone may take it


def _occurrence(namespace: str, job_id: str, instant) -> store.Occurrence:
    key = f"periodic:{namespace}:{job_id}:{instant:%Y-%m-%dT%H:%M:%SZ}"
    queue, new = client.build_activity(
        "tests.scheduler.Tick",
        {"n": 1},
        idempotency_key=key,
        metadata={"periodic_namespace": namespace, "periodic_job": job_id},
    )
    return store.Occurrence(instant, key, queue, new)


def test_enqueue_is_once_per_occurrence_and_a_stale_fence_writes_nothing(transactional_db, namespace):
    token = store.acquire_lease(namespace, "owner", 0, 30)
    fence = store.Fence(namespace, "owner", token)
    items = [_occurrence(namespace, "j", T0), _occurrence(namespace, "j", T0 + timedelta(minutes=1))]
    done = store.enqueue_occurrences(namespace, "j", items, node="owner", fence=fence)
    assert [d.created for d in done] == [True, True] and all(d.activity_id for d in done)
    again = store.enqueue_occurrences(namespace, "j", items, node="other")  # unfenced, e.g. FENCING=False
    assert [(d.created, d.activity_id) for d in again] == [(False, None), (False, None)]
    assert store.last_occurrences(namespace, ["j", "none"]) == {"j": T0 + timedelta(minutes=1)}

    store.force_lease(namespace, "thief", 0, 30)
    later = [_occurrence(namespace, "j", T0 + timedelta(minutes=2))]
    with pytest.raises(store.LeaseLost):
        store.enqueue_occurrences(namespace, "j", later, node="owner", fence=fence)
    assert store.last_occurrences(namespace, ["j"]) == {"j": T0 + timedelta(minutes=1)}  # nothing written


def test_repair_counts_and_pruning_keep_the_newest_row_of_each_job(transactional_db, namespace):
    store.count_repair(namespace, "j", "missing")
    store.count_repair(namespace, "j", "missing")
    store.count_repair(namespace, "k", "unreadable")
    assert store.repair_counts(namespace) == {"j": {"missing": 2}, "k": {"unreadable": 1}}
    for minutes in range(5):
        store.guard_occurrence(
            namespace, "j", f"{namespace}:j:{minutes}", T0 + timedelta(minutes=minutes), node="n"
        )
    assert store.prune_occurrences(namespace, T0 + timedelta(hours=1), batch=2) == 4
    assert store.last_occurrences(namespace, ["j"]) == {"j": T0 + timedelta(minutes=4)}
    assert [job for job, _ in store.recent_job_ids(namespace, T0 - timedelta(days=1))] == ["j"]


@pytest.mark.direct_postgres(
    "it kills its own server session by pid to make the next statement fail; through the pooler the "
    "killing statement may run on that very server connection, and the next one runs on another"
)
def test_database_errors_are_mapped_to_the_spec_kinds(transactional_db, namespace, live_db_url):
    store.db_now()  # the connection is open
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(live_db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(errors.Unavailable) as raised:
        store.acquire_lease(namespace, "n", 0, 30)
    assert raised.value.kind is errors.ErrorKind.UNAVAILABLE and raised.value.__cause__ is not None
    connection.close()
    assert store.acquire_lease(namespace, "n", 0, 30) is not None  # a new connection works again


def test_a_send_in_flight_hides_its_guard_from_the_unsent_scan(transactional_db, namespace):
    key = f"{namespace}:beat:x"
    assert store.guard_occurrence(namespace, "beat:x", key, T0, node="sender")
    assert not store.guard_occurrence(namespace, "beat:x", key, T0, node="other")  # taken
    sending, finish = threading.Event(), threading.Event()

    def sender():  # its own thread, so its own database session
        def send():
            sending.set()
            assert finish.wait(10)
            raise ConnectionResetError("the broker went away mid-send")

        try:
            store.send_guarded(key, "task-1", send)
        except ConnectionResetError:
            pass
        finally:
            connections.close_all()

    thread = threading.Thread(target=sender)
    thread.start()
    try:
        assert sending.wait(10)
        assert (
            store.unsent_occurrences(namespace, ["beat:x"], since=T0, older_than_seconds=0) == []
        )  # live send
    finally:
        finish.set()
        thread.join(10)
    (unsent,) = store.unsent_occurrences(namespace, ["beat:x"], since=T0, older_than_seconds=0)
    assert (unsent.key, unsent.occurrence, unsent.node) == (key, T0, "sender")  # the send failed: unconfirmed
    assert store.send_guarded(key, "task-1", lambda: None)
    assert store.unsent_occurrences(namespace, ["beat:x"], since=T0, older_than_seconds=0) == []
    assert not store.send_guarded(key, "task-1", lambda: pytest.fail("sent twice"))  # already sent
    assert not store.release_guard(key)  # a sent guard is never released
