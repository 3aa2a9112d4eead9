"""The claim statement walks a dequeue index in claim order: no Sort node on a large backlog.

The backlog is written inside the test's transaction (rolled back afterwards), and the plan is
that of exactly the SQL ``storage.claim`` runs (``storage.claim_statement``): planned for its
arguments, and as the generic plan Postgres may keep for the prepared claim (any arguments).
"""

import json
import re

import pytest
from django.db import connection

from runnerq_django import storage
from runnerq_django.storage.types import NewActivity

QUEUE = "st_plan_backlog"
BACKLOG = 100_000


@pytest.fixture
def backlog(db):
    with connection.cursor() as cursor:
        # Five types, four priorities, a tenth delayed, a tenth retrying, a tenth already done;
        # another queue of the same size next to it.
        cursor.execute(
            """
            INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, created_at,
                                            scheduled_at, retry_count, root_activity_id)
            SELECT gen_random_uuid(), q, 't' || mod(g, 5), 1 + mod(g, 4),
                   CASE mod(g, 10) WHEN 0 THEN 'scheduled' WHEN 1 THEN 'retrying' WHEN 2 THEN 'completed'
                               ELSE 'pending' END,
                   now() - make_interval(secs => g / 1000.0),
                   CASE mod(g, 10) WHEN 0 THEN now() + interval '1 hour' WHEN 1 THEN now() - interval '1 second' END,
                   CASE mod(g, 10) WHEN 1 THEN 1 ELSE 0 END, NULL
            FROM generate_series(1, %s) g, (VALUES (%s), ('st_plan_neighbour')) queues(q)
        """,
            [BACKLOG, QUEUE],
        )
        cursor.execute(
            "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) "
            "SELECT id, queue_name, 'null' FROM runnerq_activities WHERE queue_name LIKE 'st_plan_%%'"
        )
        cursor.execute("ANALYZE runnerq_activities")
        cursor.execute("ANALYZE runnerq_inputs")


def plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain(types, limit=10, queue=QUEUE) -> list[dict]:
    return list(plan_nodes(explain_plan(types, limit, queue)))


def explain_plan(types, limit=10, queue=QUEUE, generic=False) -> dict:
    statement, params = storage.claim_statement(
        queue, types=types, limit=limit, lease_ms=30000, worker_id="w"
    )
    with connection.cursor() as cursor:
        if generic:
            document = generic_plan(cursor.cursor, statement, params)
        else:
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
            document = cursor.fetchone()[0]
    document = json.loads(document) if isinstance(document, str) else document
    return document[0]["Plan"]


def generic_plan(cursor, statement: str, params: dict, analyze: bool = False):
    """The plan Postgres keeps for the prepared ``statement`` when it stops planning it per call
    (a generic plan: the same for any values of its parameters), on psycopg ``cursor``'s session;
    with ``analyze``, run (EXPLAIN ANALYZE, with buffers)."""
    import psycopg

    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
    text = re.sub(r"%\((\w+)\)s", lambda match: f"${names.index(match.group(1)) + 1}", statement)
    literal = psycopg.ClientCursor(cursor.connection)
    values = ", ".join(literal.mogrify("%s", [params[name]]) for name in names)
    cursor.execute("PREPARE rq_generic_claim AS " + text)
    try:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
        cursor.execute(f"EXPLAIN ({options}) EXECUTE rq_generic_claim({values})")
        return cursor.fetchone()[0]
    finally:
        cursor.execute("RESET plan_cache_mode")
        cursor.execute("DEALLOCATE rq_generic_claim")


# More types than a claim merges walks for: the head of the queue (the order index), then one
# walk per type (the effective index) past it.
MANY_TYPES = ["t0", "t1", "t2", "t3", "t4"] + [f"other{i}" for i in range(storage.attempts.MAX_MERGED_TYPES)]

CASES = [
    (["t1"], "idx_runnerq_dequeue_effective_v2"),  # one type: the index keyed by type
    (["t1", "t3"], "idx_runnerq_dequeue_effective_v2"),  # several: one walk per type, merged
    (["t0", "t1", "t2", "t3"], "idx_runnerq_dequeue_effective_v2"),
    (None, "idx_runnerq_dequeue_order_v2"),  # any type
    (MANY_TYPES, "idx_runnerq_dequeue_order_v2"),  # the head (and per type past it, up to 1,500 rows)
]
# Postgres compiles a statement with JIT when its estimated cost passes jit_above_cost (100,000
# by default): for a claim that costs more than the claim itself (~300 ms on this machine).
JIT_ABOVE_COST = 100_000


def sorts_per_type_heads(sort: dict) -> bool:
    """A claim of many types sorts the first ``limit`` rows of each type (one bounded walk per
    type, LATERAL over the types): at most types x limit rows, whatever the queue's size."""
    below = list(plan_nodes(sort))
    return any(
        n["Node Type"] == "Function Scan" and n.get("Function Name") == "unnest" for n in below
    ) and any(
        n["Node Type"] == "Limit"
        and any(child.get("Index Name") == "idx_runnerq_dequeue_effective_v2" for child in _walks(n))
        for n in below
    )


def sorts_each_types_walk(sort: dict, types) -> bool:
    """A claim of several types (sql_claims.claim_each_type) sorts what one walk per type locked: an
    Append of them, each a Limit over the row locks of a dequeue index walk (at most
    types x limit rows, MAX_TYPE_WALK_ROWS)."""
    appends = [n for n in plan_nodes(sort) if n["Node Type"] == "Append"]
    if types is None or len(appends) != 1:
        return False
    walks = [_walk_below(child) for child in appends[0]["Plans"]]
    return len(walks) == len(types) and all(
        walk is not None and walk.get("Index Name", "").startswith("idx_runnerq_dequeue_") for walk in walks
    )


def _walk_below(node: dict) -> dict | None:
    """The index scan whose rows a branch locks (Subquery Scan, Limit, LockRows, a gate's Result)."""
    while node["Node Type"] in ("Subquery Scan", "Limit", "LockRows", "Result") and node.get("Plans"):
        node = next(c for c in node["Plans"] if c.get("Parent Relationship") in ("Outer", "Subquery", None))
    return node if node["Node Type"] == "Index Scan" else None


def _walks(limit: dict) -> list[dict]:
    """The children of a Limit, through the Result of a one-time filter (flow control's pause
    test of the walk's type gates it)."""
    children = []
    for child in limit["Plans"]:
        if child["Node Type"] == "Result" and child.get("Plans"):
            children.extend(c for c in child["Plans"] if c.get("Parent Relationship") == "Outer")
        else:
            children.append(child)
    return children


def assert_walks_without_sorting(types, index, limit, queue=QUEUE, generic=False):
    each_type = (
        types is not None
        and 1 < len(types) <= storage.attempts.MAX_LITERAL_TYPES
        and len(types) * limit <= storage.attempts.MAX_TYPE_WALK_ROWS
    )
    if each_type:  # one walk per type (sql_claims.claim_each_type), not the head of the queue
        index = "idx_runnerq_dequeue_effective_v2"
    plan = explain_plan(types, limit, queue, generic)
    nodes = list(plan_nodes(plan))
    case = f"types={types if types is None or len(types) < 6 else f'{len(types)} types'} limit={limit}"
    case += " (generic plan)" if generic else ""
    sorts = [
        n["Node Type"]
        for n in nodes
        if "Sort" in n["Node Type"] and not (sorts_per_type_heads(n) or sorts_each_types_walk(n, types))
    ]
    assert sorts == [], f"{case}: the claim plan sorts ({sorts})"
    walks = [n for n in nodes if n.get("Index Name") == index]
    assert walks and walks[0]["Node Type"] == "Index Scan", f"{case}: no index scan on {index}"
    # The flow-control pause table (a handful of rows at most, read once per statement) may be
    # read whole; the activities never.
    assert not any(
        n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan") and n.get("Relation Name") != "runnerq_flow_pauses"
        for n in nodes
    ), f"{case}: a scan of the table"
    written_in = types is not None and len(types) <= storage.attempts.MAX_LITERAL_TYPES
    if each_type:
        # One walk per type, each locking as it goes, their rows sorted.
        assert any(sorts_each_types_walk(n, types) for n in nodes if "Sort" in n["Node Type"]), (
            f"{case}: no walk per type"
        )
    elif types is not None and len(types) > storage.attempts.MAX_MERGED_TYPES:
        # The head of the queue, then a bounded walk per type past it.
        assert any(n.get("Index Name") == "idx_runnerq_dequeue_order_v2" for n in nodes), (
            f"{case}: no head walk"
        )
        if not written_in and len(types) * limit <= storage.attempts.MAX_TYPE_WALK_ROWS:
            assert any(sorts_per_type_heads(n) for n in nodes if n["Node Type"] == "Sort"), (
                f"{case}: no walk per type"
            )
        else:
            assert any(n["Node Type"] == "Merge Append" for n in nodes), f"{case}: the walks are not merged"
    elif index == "idx_runnerq_dequeue_effective_v2" and len(types) > 1:
        # One walk per type, merged in claim order.
        assert any(n["Node Type"] == "Merge Append" for n in nodes), f"{case}: the walks are not merged"
        assert len([n for n in walks if n["Node Type"] == "Index Scan"]) >= len(types), case
    if written_in and len(types) > 1:
        # A type the queue doesn't hold is walked on the index keyed by type, which ends at once;
        # planned for a type it couldn't see, its walk filtered the order index, reading the
        # whole queue (sql_claims.claim_any_of).
        for name in (name for name in types if name.startswith(("absent", "other"))):
            assert any(
                n.get("Index Name") == "idx_runnerq_dequeue_effective_v2"
                and f"'{name}'::text" in n.get("Index Cond", "")
                for n in nodes
            ), f"{case}: the walks of {name} do not seek it"
    assert plan["Total Cost"] < JIT_ABOVE_COST, (
        f"{case}: estimated cost {plan['Total Cost']} would switch JIT on"
    )


def test_claim_walks_the_dequeue_index_without_sorting(backlog, store):
    for types, index in CASES:
        for limit in (1, 100, 1000):
            assert_walks_without_sorting(types, index, limit)
            assert_walks_without_sorting(types, index, limit, generic=True)
    # And the statement itself takes the head of the queue, in claim order.
    claimed = store.claim(QUEUE, types=["t1", "t3"], limit=50)
    assert len(claimed) == 50
    keys = [(-c.priority, -c.retry_count) for c in claimed]
    assert keys == sorted(keys)
    # Priority 4 holds t3 (g % 4 == 3, g % 5 == 3 or 1) rows; retried ones (g % 10 == 1) first.
    assert claimed[0].priority == 4 and claimed[0].retry_count == 1


MINORITY = "st_plan_minority"


@pytest.fixture(params=[("behind", 5), ("behind", 1), ("interleaved", 1)], ids=lambda p: f"{p[1]}%-{p[0]}")
def minority_backlog(db, request):
    """100,000 rows of which a small share are the types a Python worker claims (py0, py1); the
    rest are other SDKs' types (go0..go6). ``behind``: the py rows are the newest and of the
    lowest priority, so in claim order every claimable go row comes first (walking the order
    index and filtering the types passes over all of them). ``interleaved``: the types are
    spread evenly (at 1%, Postgres used to read every py row and sort them)."""
    layout, share = request.param
    py = (
        "g > %(backlog)s - %(share)s * %(backlog)s / 100"
        if layout == "behind"
        else "mod(abs(hashint4(g)), 100) < %(share)s"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, created_at,
                                            scheduled_at, retry_count, root_activity_id)
            SELECT gen_random_uuid(), %(queue)s,
                   CASE WHEN {py} THEN 'py' || mod(g, 2) ELSE 'go' || mod(abs(hashint4(g + 13)), 7) END,
                   CASE WHEN %(layout)s = 'behind' AND {py} THEN 1 ELSE 1 + mod(abs(hashint4(g + 3)), 4) END,
                   CASE mod(g, 10) WHEN 3 THEN 'scheduled' WHEN 5 THEN 'retrying' WHEN 7 THEN 'completed'
                               ELSE 'pending' END,
                   now() - make_interval(secs => (%(backlog)s - g) / 1000.0),
                   CASE mod(g, 10) WHEN 3 THEN now() + interval '1 hour' WHEN 5 THEN now() - interval '1 second' END,
                   CASE mod(g, 10) WHEN 5 THEN 1 ELSE 0 END, NULL
            FROM generate_series(1, %(backlog)s) g
        """,
            {"queue": MINORITY, "share": share, "backlog": BACKLOG, "layout": layout},
        )
        cursor.execute(
            "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) "
            "SELECT id, queue_name, 'null' FROM runnerq_activities WHERE queue_name = %s",
            [MINORITY],
        )
        cursor.execute("ANALYZE runnerq_activities")
        cursor.execute("ANALYZE runnerq_inputs")
    return request.param


def test_a_claim_of_a_minority_of_the_queue_walks_the_dequeue_indexes_without_sorting(
    minority_backlog, store
):
    """Up to the worker's largest batch (500). A claim asking for most of the claimable rows of
    its types (1,000 of the ~1,750 each py type has at 5%) is planned as reading them all and
    sorting them -- one type as well as several: bounded by the limit, and cheaper than a walk
    then."""
    many = ["py0", "py1"] + [f"absent{i}" for i in range(storage.attempts.MAX_MERGED_TYPES)]
    for types, index in [
        (["py0", "py1"], "idx_runnerq_dequeue_effective_v2"),
        (["py0"], "idx_runnerq_dequeue_effective_v2"),
        (many, "idx_runnerq_dequeue_effective_v2"),
        (None, "idx_runnerq_dequeue_order_v2"),
    ]:
        # (Many types with more than MAX_TYPE_WALK_ROWS rows to read per type: below.)
        for limit in (1, 32, 100) if types is many else (1, 32, 100, 500):
            assert_walks_without_sorting(types, index, limit, MINORITY)
            assert_walks_without_sorting(types, index, limit, MINORITY, generic=True)
    # 20 types x 100 or 500: past MAX_TYPE_WALK_ROWS, the head of the queue then one walk per
    # type merged past it (a filtered walk of the order index read every go row ahead of them).
    twenty = ["py0", "py1"] + [f"absent{i}" for i in range(18)]
    for limit in (100, 500):
        assert len(twenty) * limit > storage.attempts.MAX_TYPE_WALK_ROWS
        assert_walks_without_sorting(twenty, "idx_runnerq_dequeue_effective_v2", limit, MINORITY)
        assert_walks_without_sorting(
            twenty, "idx_runnerq_dequeue_effective_v2", limit, MINORITY, generic=True
        )
    # And it takes the head of the py rows, in claim order (compared by claim-order key: the
    # backlog's retrying rows share one due time), merged or not.
    key = "a.priority, a.retry_count, COALESCE(a.scheduled_at, a.created_at)"
    for types in (["py0", "py1"], many):
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT {key} FROM runnerq_activities a
                WHERE a.queue_name = %s AND a.activity_type IN ('py0', 'py1')
                  AND a.status IN ('pending', 'scheduled', 'retrying', 'waiting')
                  AND (a.status = 'pending' OR a.scheduled_at <= now())
                ORDER BY a.priority DESC, a.retry_count DESC, COALESCE(a.scheduled_at, a.created_at)
                LIMIT 32""",
                [MINORITY],
            )
            head = cursor.fetchall()
        claimed = store.claim(MINORITY, types=types, limit=32)
        assert {c.activity_type for c in claimed} <= {"py0", "py1"}
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT a.id, {key} FROM runnerq_activities a WHERE a.id = ANY(%s)",
                [[c.id for c in claimed]],
            )
            keys = {row[0]: row[1:] for row in cursor.fetchall()}
        assert [keys[c.id] for c in claimed] == head, f"{len(types)} types"


def test_maintenance_statements_use_their_partial_indexes(backlog):
    """The reaper seeks idx_runnerq_processing and retention idx_runnerq_root_terminal, so their
    cost follows the work to do, not the size of the table."""
    from runnerq_django.storage.sql import leases as sql_leases
    from runnerq_django.storage.sql import retention as sql_retention

    params = {"queue": QUEUE, "limit": 100, "batch": 100, "completed_s": 3600, "failed_s": 3600}
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runnerq_activities SET status = 'processing', lease_deadline_ms = 1 "
            "WHERE queue_name = %s AND activity_type = 't4' AND status = 'pending'",
            [QUEUE],
        )
        cursor.execute("ANALYZE runnerq_activities")
    for statement, index in [
        (sql_leases.REAP_READ, "idx_runnerq_processing"),
        (sql_retention.cleanup_trees(completed=True, failed=True), "idx_runnerq_root_terminal"),
    ]:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + statement, params)
            document = cursor.fetchone()[0]
        nodes = list(plan_nodes((json.loads(document) if isinstance(document, str) else document)[0]["Plan"]))
        assert index in {n.get("Index Name") for n in nodes}, statement
        assert not any(
            n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "runnerq_activities" for n in nodes
        ), statement


# -- a burst-loaded queue, never analyzed ---------------------------------------------------------

BURST_QUEUE = "st_plan_burst"
BURST_MINORITY_QUEUE = "st_plan_burst_minority"
MANY_PY_TYPES = [f"py{i}" for i in range(20)]
BURST_SHAPES = {
    "untyped": (BURST_QUEUE, None, 50),
    "one type": (BURST_QUEUE, ["t"], 50),
    "two types": (BURST_QUEUE, ["t", "u"], 50),
    "more types than merged": (
        BURST_QUEUE,
        ["t", "u"] + [f"absent{i}" for i in range(storage.attempts.MAX_MERGED_TYPES)],
        50,
    ),
    "20 types, 1% behind the rest": (BURST_MINORITY_QUEUE, MANY_PY_TYPES, 50),
    # types x limit past MAX_TYPE_WALK_ROWS: candidates read, then locked by key
    "two types, a claim of 1,000": (BURST_QUEUE, ["t", "u"], 1000),
    "20 types, 1% behind the rest, a claim of 100": (BURST_MINORITY_QUEUE, MANY_PY_TYPES, 100),
}


@pytest.fixture(scope="module")
def burst_database(django_db_blocker):
    """A database of its own, migrated, with 10,000 ``t``/``u`` and 10,000 ``go`` activities
    written at once, and a queue of 100,000 where 20 types are 1% behind the rest, and no
    statistics at all (autovacuum off on the tables, so none appear while the test runs): the
    state of a queue right after a burst of submissions."""
    import psycopg

    from tests.helpers import manage, scratch_database, url_for

    with django_db_blocker.unblock():
        server = url_for(connection.settings_dict)
    with scratch_database(server, prefix="rq_burst") as url:
        manage("migrate", "--no-input", db_url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            for table in ("runnerq_activities", "runnerq_inputs"):
                conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            conn.execute(
                """
                INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, root_activity_id)
                SELECT gen_random_uuid(), %s, CASE WHEN g <= 10000 THEN CASE mod(g, 2) WHEN 1 THEN 't' ELSE 'u' END
                                                   ELSE 'go' END, 1 + mod(g, 4), 'pending', NULL
                FROM generate_series(1, 20000) g""",
                [BURST_QUEUE],
            )
            conn.execute(
                """
                INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, root_activity_id)
                SELECT gen_random_uuid(), %s, CASE WHEN mod(g, 100) = 0 THEN 'py' || mod(g / 100, 20) ELSE 'go' END,
                       CASE WHEN mod(g, 100) = 0 THEN 1 ELSE 2 END, 'pending', NULL
                FROM generate_series(1, 100000) g""",
                [BURST_MINORITY_QUEUE],
            )
            conn.execute(
                "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) "
                "SELECT id, queue_name, 'null' FROM runnerq_activities"
            )
        yield url


def _gated(node: dict) -> dict:
    """The walk under flow control's pause tests: the Result of a one-time filter (a paused
    queue or type) and the anti-join with the pause table (paused types, per row)."""
    while (node["Node Type"] == "Result" and "One-Time Filter" in node and node.get("Plans")) or (
        node["Node Type"] == "Nested Loop" and node.get("Join Type") == "Anti"
    ):
        node = next(c for c in node["Plans"] if c.get("Parent Relationship") == "Outer")
    return node


# The fallback's ``a.id NOT IN (SELECT id FROM candidates)``, a test against the candidates CTE
# (a SubPlan), not a lookup of a candidate: PostgreSQL 15 prints it ``NOT (hashed SubPlan 15)``,
# 17 and later ``NOT (ANY (id = (hashed SubPlan 15).col1))``.
_NOT_IN_SUBPLAN = re.compile(r"\bANY \(\w+ = \((?:hashed )?SubPlan \d+\)\.col\d+\)")


def _lookups(condition: str) -> str:
    """``condition`` (an Index Cond or Filter) without the SubPlan tests of NOT IN: what is left
    mentions ``id = `` only where it compares the row's id with a candidate's."""
    return _NOT_IN_SUBPLAN.sub("(SubPlan)", condition)


def burst_plan(url: str, queue: str, types, limit: int, generic=False) -> list[dict]:
    import psycopg

    statement, params = storage.claim_statement(queue, types=types, limit=limit, worker_id="w")
    # A client-side binding cursor, as Django's: the planner sees the values as the claim sends them.
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        if generic:
            document = generic_plan(conn.cursor(), statement, params)
        else:
            document = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()[0]
        analyzed = conn.execute(
            "SELECT count(*) FILTER (WHERE s.analyze_count + s.autoanalyze_count > 0 OR c.reltuples >= 0) "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.relname IN ('runnerq_activities', 'runnerq_inputs')"
        ).fetchone()[0]
    assert analyzed == 0, "the burst tables have statistics: this is no longer the un-analyzed case"
    return list(plan_nodes(document[0]["Plan"]))


@pytest.mark.parametrize("generic", [False, True], ids=["planned per call", "generic plan"])
@pytest.mark.parametrize("shape", BURST_SHAPES)
def test_a_claim_locks_its_rows_through_the_primary_key_on_an_unanalyzed_burst(
    burst_database, shape, generic
):
    """Without statistics Postgres guessed that ``idx_runnerq_dequeue_effective_v2`` (queue_name =
    the burst's queue) finds one row as cheaply as the primary key, and looked each candidate of
    a multi-type claim up there, filtering ``id = c.id``: 11,225 rows passed over per candidate,
    0.86 s for a claim of 50 (44 ms after ANALYZE). Every row lock must sit either on a dequeue
    index walk (the walk locks as it goes) or on a primary-key lookup of one candidate."""
    queue, types, limit = BURST_SHAPES[shape]
    nodes = burst_plan(burst_database, queue, types, limit, generic)
    locks = [_gated(n["Plans"][0]) for n in nodes if n["Node Type"] == "LockRows"]
    assert locks, f"{shape}: no row locks in the plan"
    for scan in locks:
        where = f"{scan.get('Index Cond', '')} {scan.get('Filter', '')}"
        assert scan["Node Type"] == "Index Scan", f"{shape}: rows locked on a {scan['Node Type']}"
        if scan["Index Name"] == "runnerq_activities_pkey":
            assert "(id = " in scan["Index Cond"], (
                f"{shape}: a primary-key scan that is not a lookup: {where}"
            )
        else:
            assert scan["Index Name"].startswith("idx_runnerq_dequeue_"), (
                f"{shape}: rows locked on {scan['Index Name']}"
            )
            assert "id = " not in _lookups(where), (
                f"{shape}: a candidate looked up on {scan['Index Name']}: {where}"
            )
    if types and len(types) * limit > storage.attempts.MAX_TYPE_WALK_ROWS:
        assert any(s["Index Name"] == "runnerq_activities_pkey" for s in locks), (
            f"{shape}: candidates not locked by key"
        )
    # The rows claimed are then updated through the primary key too, and no step reads the whole
    # queue (a visible bound on the head of a never-analyzed queue made it look small enough to
    # read whole and sort).
    updated = [n for n in nodes if n["Node Type"] == "ModifyTable"]
    assert updated and all(n["Plans"][0]["Node Type"] == "Nested Loop" for n in updated), shape
    scans = [
        n.get("Filter", "")
        for n in nodes
        if n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan")
        and n.get("Relation Name") == "runnerq_activities"
    ]
    assert not scans, f"{shape}: a scan of the table, filtering {scans}"


@pytest.mark.parametrize("limit", [32, 100], ids=["each type walked", "candidates past the head"])
def test_a_claim_of_many_types_past_a_head_another_claimer_holds_seeks_each_type(
    queue, live_db_url, store, limit
):
    """A queue holding one type (so a type the planner can't see looks like the whole queue) and
    a worker claiming its 20 handlers' types, with the generic plan the dispatcher runs, while
    another claimer holds the head of the queue: past the head the claim seeks each type on the
    index keyed by type. It walked the order index filtering each type instead, reading the
    queue once per type it doesn't hold (81 ms a claim on 20,000 rows, in every burn-down where
    two workers' claims met). Both shapes: a claim that walks each type, locking as it goes, and
    one whose types x limit is past MAX_TYPE_WALK_ROWS, which reads its candidates past the head
    and locks them one by one."""
    import psycopg

    store.submit_many(queue, [NewActivity("t", payload=i) for i in range(10_000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runnerq_activities, runnerq_inputs")
    types = ["t"] + [f"absent{i}" for i in range(19)]
    statement, params = storage.claim_statement(queue, types=types, limit=limit, worker_id="w")
    with psycopg.connect(live_db_url) as holder:  # another claim in flight, holding the head
        holder.execute(
            "SELECT id FROM runnerq_activities WHERE queue_name = %s ORDER BY created_at LIMIT %s FOR UPDATE",
            [queue, limit + 8],
        )
        with connection.cursor() as cursor:
            document = generic_plan(cursor.cursor, statement, params, analyze=True)
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    assert plan["Actual Rows"] == limit  # the ones after the held ones
    read = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    # A claimed row costs about 20 (its update, index entries and input); the walks of the 19
    # types the queue doesn't hold read the whole queue each: 3,179 buffers for 32 rows of 5,000.
    assert read < 40 * limit + 500, f"the claim read {read} buffers"
