"""The claim statement walks a dequeue index in claim order: no Sort node on a large backlog.

The backlog is written inside the test's transaction (rolled back afterwards), and the plan is
that of exactly the SQL ``storage.claim`` runs (``storage.claim_statement``).
"""

import json

import pytest
from django.db import connection

from runnerq_django import storage

QUEUE = "st_plan_backlog"
BACKLOG = 100_000


@pytest.fixture
def backlog(db):
    with connection.cursor() as cursor:
        # Five types, four priorities, a tenth delayed, a tenth retrying, a tenth already done;
        # another queue of the same size next to it.
        cursor.execute("""
            INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, created_at,
                                            scheduled_at, retry_count, root_activity_id)
            SELECT gen_random_uuid(), q, 't' || mod(g, 5), 1 + mod(g, 4),
                   CASE mod(g, 10) WHEN 0 THEN 'scheduled' WHEN 1 THEN 'retrying' WHEN 2 THEN 'completed'
                               ELSE 'pending' END,
                   now() - make_interval(secs => g / 1000.0),
                   CASE mod(g, 10) WHEN 0 THEN now() + interval '1 hour' WHEN 1 THEN now() - interval '1 second' END,
                   CASE mod(g, 10) WHEN 1 THEN 1 ELSE 0 END, NULL
            FROM generate_series(1, %s) g, (VALUES (%s), ('st_plan_neighbour')) queues(q)
        """, [BACKLOG, QUEUE])
        cursor.execute("INSERT INTO runnerq_inputs (activity_id, queue_name, payload) "
                       "SELECT id, queue_name, 'null' FROM runnerq_activities WHERE queue_name LIKE 'st_plan_%%'")
        cursor.execute("ANALYZE runnerq_activities")
        cursor.execute("ANALYZE runnerq_inputs")


def plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain(types, limit=10) -> list[dict]:
    statement, params = storage.claim_statement(QUEUE, types=types, limit=limit, lease_ms=30000, worker_id="w")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + statement, params)
        document = cursor.fetchone()[0]
    document = json.loads(document) if isinstance(document, str) else document
    return list(plan_nodes(document[0]["Plan"]))


CASES = [
    (["t1"], "idx_runnerq_dequeue_effective_v2"),  # one type: the index keyed by type
    (["t1", "t3"], "idx_runnerq_dequeue_order_v2"),  # several: the order index, filtering types
    (["t0", "t1", "t2", "t3"], "idx_runnerq_dequeue_order_v2"),
    (None, "idx_runnerq_dequeue_order_v2"),  # any type
]


def test_claim_walks_the_dequeue_index_without_sorting(backlog):
    for types, index in CASES:
        for limit in (1, 100, 1000):
            nodes = explain(types, limit)
            case = f"types={types} limit={limit}"
            sorts = [n["Node Type"] for n in nodes if "Sort" in n["Node Type"]]
            assert sorts == [], f"{case}: the claim plan sorts ({sorts})"
            walks = [n for n in nodes if n.get("Index Name") == index]
            assert walks and walks[0]["Node Type"] == "Index Scan", f"{case}: no index scan on {index}"
            assert not any(n["Node Type"] == "Seq Scan" for n in nodes), f"{case}: a sequential scan"
    # And the statement itself takes the head of the queue, in claim order.
    claimed = storage.claim(QUEUE, types=["t1", "t3"], limit=50)
    assert len(claimed) == 50
    keys = [(-c.priority, -c.retry_count) for c in claimed]
    assert keys == sorted(keys)
    # Priority 4 holds t3 (g % 4 == 3, g % 5 == 3 or 1) rows; retried ones (g % 10 == 1) first.
    assert claimed[0].priority == 4 and claimed[0].retry_count == 1


def test_maintenance_statements_use_their_partial_indexes(backlog):
    """The reaper seeks idx_runnerq_processing and retention idx_runnerq_root_terminal, so their
    cost follows the work to do, not the size of the table."""
    from runnerq_django.storage import sql

    params = {"queue": QUEUE, "limit": 100, "batch": 100, "completed_s": 3600, "failed_s": 3600}
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runnerq_activities SET status = 'processing', lease_deadline_ms = 1 "
                       "WHERE queue_name = %s AND activity_type = 't4' AND status = 'pending'", [QUEUE])
        cursor.execute("ANALYZE runnerq_activities")
    for statement, index in [
        (sql.REAP_READ, "idx_runnerq_processing"),
        (sql.cleanup_trees(completed=True, failed=True), "idx_runnerq_root_terminal"),
    ]:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + statement, params)
            document = cursor.fetchone()[0]
        nodes = list(plan_nodes((json.loads(document) if isinstance(document, str) else document)[0]["Plan"]))
        assert index in {n.get("Index Name") for n in nodes}, statement
        assert not any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "runnerq_activities"
                       for n in nodes), statement
