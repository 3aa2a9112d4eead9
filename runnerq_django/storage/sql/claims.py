"""The claim: its order and filters (due, our input, pauses), the claim of one type, of listed
types, of many types, its bounds, and the claim tokens (``storage.attempts``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from runnerq_django.storage.sql.common import NOW_MS, OUR_INPUT, RUNNABLE

# The claim order: the dequeue index's order (priority, attempts, due time).
CLAIM_ORDER = "a.priority DESC, a.retry_count DESC, COALESCE(a.scheduled_at, a.created_at)"

# Claimable: runnable and due (DUE, which a lock rechecks on the row as locked), with an input we
# can read (OUR_INPUT: inputs are written once, and a recheck in the same statement would read
# them with the same snapshot, so the walks alone test it).
DUE = f"""a.status IN {RUNNABLE}
          AND (a.status = 'pending' OR a.scheduled_at <= now())"""

# Flow control (storage/flow.py): a paused queue (a runnerq_flow_pauses row with an
# empty type) or type is skipped by every claim. The queue's test is an uncorrelated sub-select:
# Postgres runs it once per statement (an InitPlan, a one-time filter that stops the walk before it
# reads a row), so with no pause it costs one probe of the small pause table.
QUEUE_NOT_PAUSED = """NOT EXISTS (SELECT 1 FROM runnerq_flow_pauses p
                      WHERE p.queue_name = %(queue)s AND p.activity_type = '')"""


def type_not_paused(activity_type: str) -> str:
    """The pause test of one type (``activity_type``: its SQL parameter, or a column outside the
    walk), a one-time filter of that type's walk: a paused type's walk reads no row. Also no
    estimate changes: a row filter here made Postgres expect to pass over most rows and sort."""
    return f"""NOT EXISTS (SELECT 1 FROM runnerq_flow_pauses p
                      WHERE p.queue_name = %(queue)s AND p.activity_type = {activity_type})"""


# The pause test of each row, for walks over several types (a claim of any type, or of types by
# ANY()): an anti-join, one probe of the pause table's primary key per row read. Other spellings
# (<> ALL (ARRAY(...)), NOT IN) made Postgres expect most rows to be paused, and plan the walk of a
# large claim at several times its cost (JIT on); the anti-join's estimate comes from the table.
TYPE_ROW_NOT_PAUSED = """NOT EXISTS (SELECT 1 FROM runnerq_flow_pauses p
                      WHERE p.queue_name = %(queue)s AND p.activity_type = a.activity_type)"""

# The claim's type filter (``claim``'s ``type_filter``) of any type: paused types skipped per row.
ANY_TYPE = f"AND {TYPE_ROW_NOT_PAUSED}"

# The claim's type filter of one type: a paused one read not at all.
ONE_TYPE = f"AND a.activity_type = %(type)s AND {type_not_paused('%(type)s')}"

# The claim's type filter of the listed types (by ANY()): paused types skipped per row.
LISTED_TYPES = f"AND a.activity_type = ANY(%(types)s::text[]) AND {TYPE_ROW_NOT_PAUSED}"

# Claimable: due, with an input we read, neither its queue nor its type paused.
CLAIMABLE = f"""{DUE}
          AND {OUR_INPUT}
          AND {QUEUE_NOT_PAUSED}"""

# The last column with created_at is the due time: with the priority and the attempts it is the
# claim order, which the caller sorts the returned rows by (claim_order breaking ties in index
# order). The columns another SDK may have filled with a value Python can't read (jsonb,
# timestamps) come as text, decoded per row (storage.decode), so that such a row fails alone
# instead of making the whole fetch raise. started_at, which this statement sets, is text too:
# datetime.fromisoformat reads it at a fraction of the cost of Django's timestamptz loader (the
# loader was 8% of a burn-down worker's Python).
CLAIMED_COLUMNS = """c.claim_order, c.id, c.current_worker_id, c.activity_type, c.priority, c.retry_count,
       c.max_retries, c.timeout_seconds, c.retry_delay_seconds, c.max_retry_delay_seconds,
       c.lease_deadline_ms, c.started_at::text, c.created_at::text, c.metadata::text, c.idempotency_key,
       c.parent_activity_id, c.root_activity_id, c.depth, i.payload::text, c.scheduled_at::text,
       i.serialization"""


def _claim_update(picked: str, token: str) -> str:
    """The end of every claim statement: ``picked`` (CTEs ending in ``picked (id, claim_order)``,
    the locked rows) become ``processing`` under a fresh token each, returned with their payloads.

    The inputs are joined on ``COALESCE(c.id, c.id)``, the claimed id behind an expression the
    planner has no statistics for, so that it looks each input up by primary key. Joined on
    ``c.id``, PostgreSQL 18 (17 not tried) found hashing the claimed rows and reading the whole
    input table cheaper than looking up 500 or more -- apparently from statistics it now has for
    the CTE's ids, since hiding them is what restores the lookups: on the 200,000 inputs of
    tests/storage/test_claim_plan.py (default costs, all cached) a claim of 1,000 took ~41 ms
    instead of ~24, one of 500 ~19 ms instead of ~10. PostgreSQL 15 plans it the same, cost for
    cost, either way. (A LATERAL lookup, ``OFFSET 0``, is costed per lookup without the discount
    of repeated ones, ~2 more a row: a claim of 13 types and 1,000 rows would then pass
    jit_above_cost.)"""
    return f"""
WITH {picked},
c AS (
    UPDATE runnerq_activities a
    SET status = 'processing', current_worker_id = {token},
        lease_deadline_ms = {NOW_MS} + %(lease_ms)s, started_at = now(), waiting_result_id = NULL
    FROM picked
    WHERE a.id = picked.id
    RETURNING picked.claim_order, a.*
)
SELECT {CLAIMED_COLUMNS}
FROM c LEFT JOIN runnerq_inputs i ON i.activity_id = COALESCE(c.id, c.id)
"""


@functools.cache  # a few shapes, built once: a claim reuses its text
def claim(type_filter: str, token: str) -> str:
    """The claim statement of one type or of any type: lock the next due activities in claim
    order, mark them processing under a fresh token each, and return them with their payloads
    -- one round trip.

    ``type_filter`` is ``""`` (any type: walks ``idx_runnerq_dequeue_order_v2``),
    ``"AND a.activity_type = %(type)s"`` (one type: ``idx_runnerq_dequeue_effective_v2``, whose
    key starts with the type) or ``"AND a.activity_type = ANY(%(types)s::text[])"`` (more types
    than ``claim_any_of`` merges, with more than ``attempts.MAX_TYPE_WALK_ROWS`` rows for
    ``claim_many_types`` to read: the order index, filtering the types). The walk locks as it
    goes (``FOR UPDATE SKIP LOCKED``), so rows another claimer holds are passed over and the
    walk goes on to the next ones. ``token`` is the SQL expression of a claim token (one per
    row, so a reclaim fences the previous holder).

    Rows whose input another SDK wrote in a serialization we can't read are left for that SDK
    (``OUR_INPUT``); a missing input row reads as a JSON null payload. The walk tests that
    positive list, so such a row is passed over, never locked and then dropped (which, at the
    head of the queue, would make every claim come back empty). The order of the batch is the
    claim order (``row_number() OVER ()`` over the locked walk, no sort).
    """
    return _claim_update(
        f"""picked AS (
    SELECT due.id, row_number() OVER () AS claim_order FROM (
        SELECT a.id FROM runnerq_activities a
        WHERE a.queue_name = %(queue)s {type_filter}
          AND {CLAIMABLE}
        ORDER BY {CLAIM_ORDER}
        LIMIT %(limit)s
        FOR UPDATE OF a SKIP LOCKED
    ) due
)""",
        token,
    )


def _numbered_in_claim_order(walks: str, limit: str) -> str:
    """The first ``limit`` rows of ``walks`` (a UNION ALL of ``_walk_of_type``) in claim order,
    numbered in it: ``(id, claim_order)``."""
    return f"""SELECT s.id, row_number() OVER () AS claim_order FROM (
        SELECT w.id FROM (
            {walks}
        ) w
        ORDER BY w.priority DESC, w.retry_count DESC, w.due_at
        LIMIT {limit}
    ) s"""


def _walk_of_type(name: str, limit: str, *, past: str = "", locking: bool = False) -> str:
    """The claimable rows of one type ``name`` (an SQL expression) in claim order, at most
    ``limit``, with their claim-order key: a walk of ``idx_runnerq_dequeue_effective_v2`` (keyed by
    the type), ended at once by a pause of the type. ``past``: a condition on the rows (the ones
    a claim already holds as candidates left out); ``locking``: each row locked as it is read."""
    lock = "\n             FOR UPDATE OF a SKIP LOCKED" if locking else ""
    return f"""SELECT a.id, a.priority, a.retry_count, COALESCE(a.scheduled_at, a.created_at) AS due_at
             FROM runnerq_activities a
             WHERE a.queue_name = %(queue)s AND a.activity_type = {name}
               AND {CLAIMABLE}{past}
               AND {type_not_paused(name)}
             ORDER BY {CLAIM_ORDER}
             LIMIT {limit}{lock}"""


@functools.cache  # one statement per set of types: a worker's are fixed
def claim_each_type(types: tuple[str, ...], token: str) -> str:
    """The claim statement of several types, ``types`` written into it (``type_literal``): one
    walk per type on ``idx_runnerq_dequeue_effective_v2`` (whose key starts with the type), each
    locking as it goes (``FOR UPDATE SKIP LOCKED``) up to ``%(limit)s`` rows, then the first
    ``%(limit)s`` of them all in claim order. For ``attempts.claim_statement`` to choose while
    types x limit is at most ``attempts.MAX_TYPE_WALK_ROWS``: that bounds what is read, locked
    and sorted (and the plan's estimate, under ``jit_above_cost``), whatever the queue's size.

    Each walk locks a row as it reads it, as the one-type claim does, so another claimer's rows
    in flight are passed over and the walk goes on past them. The claims that read their
    candidates first and locked them after (``claim_any_of``, ``claim_many_types``) took a
    candidate that another claimer claimed in between, and its lock stayed until the claim
    committed, although the row failed the recheck: that claimer's completion of the row waited
    for it. In a burn-down of two workers claiming their 20 types from a queue holding one of
    them, the completions waited on the other worker's claims in 38% of the samples and the
    burn-down ran at 10,000-12,000 activities a second instead of 17,000-20,000. The price: a
    walk locks up to ``%(limit)s`` rows of its type, so with several types holding claimable
    rows the rows past the first ``%(limit)s`` of them all stay locked until the claim commits
    (other claimers pass over them meanwhile), which costs a lock each; with 5 and 20 types
    holding rows, the burn-downs were still 1.5 times faster.

    A type the planner can see is planned for itself: a walk of a type the queue doesn't hold
    seeks its index and ends at once (``claim_any_of``)."""
    walks = _union_of_locking_walks(
        _walk_of_type(type_literal(name), "%(limit)s", locking=True) for name in types
    )
    return _claim_update(f"picked AS (\n    {_numbered_in_claim_order(walks, '%(limit)s')}\n)", token)


def _union_of_locking_walks(walks: Iterable[str]) -> str:
    """``walks`` (each a ``_walk_of_type`` with ``locking``) as one UNION ALL: each a sub-SELECT
    of its own, as a UNION's branch can't lock rows itself (``FOR UPDATE`` is not allowed with
    ``UNION``)."""
    return "\n        UNION ALL\n        ".join(
        f"SELECT * FROM ({walk}) w{index}" for index, walk in enumerate(walks)
    )


def type_literal(name: str) -> str:
    """An activity type written into a statement: an escape string (``E'...'``, its backslashes
    and quotes doubled, so it reads the same whatever ``standard_conforming_strings`` says), its
    ``%`` doubled as every literal ``%`` of a statement with placeholders."""
    return "E'" + name.replace("\\", "\\\\").replace("'", "''").replace("%", "%%") + "'"


@functools.cache  # a few shapes, built once: a claim reuses its text
def claim_any_of(types: tuple[str, ...], token: str) -> str:
    """The claim statement of several types, ``types``, written into it (``type_literal``).

    A Python worker usually claims only its own handlers' types from a queue it shares with
    other SDKs' workers, so the listed types may be a small minority of the queue: walking
    ``idx_runnerq_dequeue_order_v2`` and filtering the types would pass over every row of the
    other types ahead of them (and at a small share Postgres prefers to read all rows of the
    types and sort them). Instead, one statement:

    1. ``candidates``: one ``idx_runnerq_dequeue_effective_v2`` walk per type (the key starts
       with the type, then the claim order), merged in claim order by a Merge Append (no sort),
       at most ``%(candidates)s`` rows. No locks here: Postgres can't merge walks that lock
       rows (a locking subquery loses its order, and the merge would lock the head row of
       every walk). Everything is read on demand, so only as many rows as step 2 asks for.
       Each walk's bound is a sub-SELECT, which the planner can't see: it then plans for
       reading a tenth of the type's rows, a walk of the index, whatever the type's size. With
       a visible bound close to a type's row count it would read all of them and sort them. The
       outer bound is a constant, which keeps the plan's estimated cost proportional to it (a
       cost past ``jit_above_cost`` would make Postgres JIT-compile every claim). Each type is
       written into the statement (one statement per set of types: a worker's are fixed), so
       Postgres plans each walk for its type. As a parameter it can't see, a type was estimated
       at 1/n_distinct of the queue: all of it on a queue holding one type, so the walk of a type
       the queue doesn't hold filtered the order index instead, reading the whole queue (24 ms
       over 20,000 rows instead of 0.15; with the values visible to the custom plans only,
       Postgres planned every call anew).
    2. ``locked``: the candidates in claim order, each looked up by primary key and locked
       ``FOR UPDATE SKIP LOCKED``, with DUE rechecked on the row as locked (the lock returns the
       latest version), until ``%(limit)s`` are locked. The lookup's only condition is the id,
       and the recheck stays above it (``OFFSET 0`` keeps Postgres from pushing it down), so no
       other index can serve the lookup whatever the statistics say: on a burst-loaded table
       that was never analyzed, Postgres took the queue's dequeue index for as selective as the
       primary key and passed over ~10,000 rows per candidate (0.86 s for a claim of 50).
       The queue needs no recheck: the candidates are the queue's and a row never changes
       queue. A candidate that another claimer holds, or took meanwhile, is passed over and
       the next one tried, as the one-type walk does. The caller asks for ``limit + 1000``
       candidates: other claimers' batches in flight (at most 1,000 each) can't exhaust them,
       so, like a walk, the claim comes back short only when no more claimable rows are free
       -- which is what a worker takes a short batch to mean (it waits for a NOTIFY before
       claiming again).
    3. ``fallback``: only when the candidates ran out (all ``%(candidates)s`` read, fewer than
       ``%(limit)s`` locked), the first free claimable row of each type past them, so that a
       claim never comes back empty while claimable work of its types is free. One row per
       type keeps the estimate of this branch, which is part of the plan's cost, small.

    The fallback's rows come after every candidate in claim order; all rows come back with
    their claim-order key and the caller sorts by it.
    """
    union = "\n            UNION ALL\n            "
    merged = union.join(
        f"({_walk_of_type(name, '(SELECT %(candidates)s)')})" for name in map(type_literal, types)
    )
    return _claim_update(
        f"""candidates AS (
    {_numbered_in_claim_order(merged, "%(candidates)s")}
),
{_lock_candidates("(SELECT count(*) FROM candidates) >= %(candidates)s", types)}""",
        token,
    )


def _lock_candidates(exhausted: str, types: tuple[str, ...] | None) -> str:
    """The CTEs that end a claim of several types: ``locked`` (the candidates, CTE
    ``candidates (id, claim_order)``, locked by primary key in claim order), ``fallback`` (when
    they fell short and ``exhausted`` says more claimable rows may lie past them, the first free
    row of each type) and ``picked``. See ``claim_any_of``, steps 2 and 3. ``types``: written
    into the fallback's walks, one per type; ``None``: the walks are LATERAL over the
    parameter ``types``."""
    return f"""locked AS (
    SELECT a.id, c.claim_order FROM candidates c
    CROSS JOIN LATERAL (
        SELECT r.id, r.status, r.scheduled_at FROM runnerq_activities r
        WHERE r.id = c.id
        FOR UPDATE OF r SKIP LOCKED
        OFFSET 0
    ) a
    WHERE {DUE}
    LIMIT %(limit)s
),
{_fallback(exhausted, types)},
picked AS (
    SELECT id, claim_order FROM locked
    UNION ALL
    SELECT id, %(candidates)s + 1 FROM fallback
    LIMIT %(limit)s
)"""


def _fallback(exhausted: str, types: tuple[str, ...] | None) -> str:
    """``fallback``: when ``exhausted``, the first free claimable row of each type past the
    candidates (see ``_lock_candidates``)."""

    def walk(name: str) -> str:
        return _walk_of_type(
            name, "1", past="\n               AND a.id NOT IN (SELECT id FROM candidates)", locking=True
        )

    if types is None:
        return f"""fallback AS (
    SELECT w.id FROM unnest((SELECT %(types)s::text[])) AS t(activity_type)
    CROSS JOIN LATERAL ({walk("t.activity_type")}) w
    WHERE {exhausted}
)"""
    walks = _union_of_locking_walks(walk(type_literal(name)) for name in types)
    return f"""fallback AS (
    SELECT w.id FROM (
        {walks}
    ) w
    WHERE {exhausted}
)"""


@functools.cache  # a few shapes, built once: a claim reuses its text
def claim_many_types(token: str, types: tuple[str, ...] | None = None, merged: int | None = None) -> str:
    """The claim statement of more types than ``claim_any_of`` merges: ``types`` written into it
    (``type_literal``, as ``claim_any_of``: one statement per set of types), or, for more types
    than ``attempts.MAX_LITERAL_TYPES``, the parameter ``types`` (an array), so that the
    statement's size doesn't grow with the number of types. Two sources of candidates, in claim
    order, read on demand:

    1. ``head``: the first ``%(limit)s`` claimable rows of the queue, any type, walking
       ``idx_runnerq_dequeue_order_v2``; the candidates are those of the listed types. When
       the listed types are most of the queue and no other claimer holds them, this is all a
       claim reads, like a one-type walk. The bound keeps the walk short when they are a
       small minority behind other SDKs' rows (a filtered walk of the whole index passed over
       every one). The walk is the untyped claim's, bound and filter: with a cheaper filter
       (due only) or a larger bound (the limit + 1,000 of ``claim_any_of``), a queue that was
       never analyzed looked cheaper to read whole and sort (100,000 rows for a claim of 50).
    2. ``beyond``: only when the head's candidates ran out and it was full (so rows of the
       types may lie past it: the types' rows behind others, or other claimers' rows in flight
       took some of the head), the claimable rows of each type not in the head, one
       ``idx_runnerq_dequeue_effective_v2`` walk per type, merged in claim order (a Merge
       Append, as ``claim_any_of``), up to ``ROWS_PAST_HEAD`` read on demand. Past
       ``attempts.MAX_LITERAL_TYPES``, with the types as a parameter, the walks are LATERAL
       over them, the first ``%(limit)s`` rows of each, sorted: at most ``types x limit`` rows
       read and sorted, whatever the size of the queue; a walk of a
       LATERAL type is planned for a type it can't see, which the order index may serve (see
       ``claim_any_of``), so the worker's claims write their types in up to
       ``attempts.MAX_LITERAL_TYPES``.

    Every row of ``beyond`` comes after every row of the head in claim order (the head is a
    prefix of the queue's claim order), so candidates are numbered in claim order. They are
    locked by primary key, with the fallback of ``claim_any_of`` when ``beyond`` was full.

    ``merged`` (the number of types, parameters ``type_0`` ...), with the types as a parameter:
    ``beyond`` merges one walk per type instead of sorting ``types x limit`` rows, for claims
    whose sort would be estimated past ``jit_above_cost`` (``attempts.MAX_TYPE_WALK_ROWS``).
    Each type and bound is a sub-SELECT the planner can't see, so the prepared statement's plans
    are all the generic one: Postgres would otherwise plan the walks anew each time.
    """
    beyond_bound = str(ROWS_PAST_HEAD)  # the merged walks read up to it past the head
    if types is not None:
        names = [type_literal(name) for name in types]
        beyond = _beyond_merged(names)
        listed = f"h.activity_type IN ({', '.join(names)})"
    elif merged is not None:
        beyond = _beyond_merged([f"(SELECT %(type_{index})s)" for index in range(merged)])
        listed = "h.activity_type = ANY(%(types)s::text[])"
    else:
        beyond, beyond_bound = _beyond_sorted, "%(limit)s"
        listed = "h.activity_type = ANY(%(types)s::text[])"
    return _claim_update(
        f"""head AS (
    SELECT a.id, a.activity_type FROM runnerq_activities a
    WHERE a.queue_name = %(queue)s AND {CLAIMABLE}
    ORDER BY {CLAIM_ORDER}
    LIMIT %(limit)s
),
{beyond},
candidates AS (
    SELECT u.id, row_number() OVER () AS claim_order FROM (
        SELECT h.id FROM head h WHERE {listed}
            AND {type_not_paused("h.activity_type")}  -- flow control: the head stays a bounded walk
        UNION ALL
        SELECT id FROM beyond
    ) u
),
{_lock_candidates(f"(SELECT count(*) FROM beyond) >= {beyond_bound}", types)}""",
        token,
    )


# claim_many_types' ``beyond``: the first ``limit`` rows of each type past the head, sorted.
_beyond_sorted = f"""beyond AS (
    SELECT w.id FROM unnest(%(types)s::text[]) AS t(activity_type)
    CROSS JOIN LATERAL (
        SELECT a.id, a.priority, a.retry_count, COALESCE(a.scheduled_at, a.created_at) AS due_at
        FROM runnerq_activities a
        WHERE a.queue_name = %(queue)s AND a.activity_type = t.activity_type
          AND {CLAIMABLE}
          AND a.id NOT IN (SELECT id FROM head)
          AND {type_not_paused("t.activity_type")}  -- flow control: a paused type's walk reads nothing
        ORDER BY {CLAIM_ORDER}
        LIMIT %(limit)s
    ) w
    WHERE (SELECT count(*) FROM head) >= %(limit)s
    ORDER BY w.priority DESC, w.retry_count DESC, w.due_at
)"""

# How many rows a claim of many types reads past the head of the queue, at most (on demand): the
# largest batch (validation.MAX_BATCH), so that other claimers' batches in flight there leave it
# enough free ones. With only its own limit past the head, another claimer's batch in flight
# there left too few: the claim came back short while work was free, and the worker waited for
# a NOTIFY or its poll (in a burn-down of two workers claiming 20 types, one of them did five
# sixths of the work). Postgres costs every row read there, and a claim of 1,000 reading 1,500
# was estimated past jit_above_cost (tests/storage/test_claim_plan.py).
ROWS_PAST_HEAD = 1000


def _beyond_merged(types: list[str]) -> str:
    """claim_many_types' ``beyond`` for ``types`` (each an SQL expression of a type): one walk per
    type past the head, merged in claim order, up to ``ROWS_PAST_HEAD`` rows of the merge, read
    on demand."""
    past_head = "\n               AND a.id NOT IN (SELECT id FROM head)"
    walks = "\n        UNION ALL\n        ".join(
        f"({_walk_of_type(name, f'(SELECT {ROWS_PAST_HEAD})', past=past_head)})" for name in types
    )
    return f"""beyond AS (
    SELECT u.id FROM (
        {walks}
    ) u
    WHERE (SELECT count(*) FROM head) >= %(limit)s
    ORDER BY u.priority DESC, u.retry_count DESC, u.due_at
    LIMIT {ROWS_PAST_HEAD}
)"""


def with_bounds(statement: str, params: dict[str, Any]) -> str:
    """``statement`` with its row bounds (``%(limit)s``, ``%(candidates)s``, integers the caller
    validated) written as literals, one statement text per bound. The hot claims are prepared
    (planned once per connection, then Postgres may keep a generic plan for any parameter
    values), and a generic plan of ``LIMIT $1`` assumes a tenth of the table: the claim's
    update then joins by sequential scans (15 ms instead of 2 for a claim of 32 from 20,000).
    A literal bound keeps the plan the one-off statement gets."""
    bounds = []
    for name in ("limit", "candidates"):
        value = params.get(name)
        if value is not None and type(value) is not int:
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        bounds.append(value)
    return _bounded(statement, *bounds)


@functools.lru_cache(maxsize=512)
def _bounded(statement: str, limit: int | None, candidates: int | None) -> str:
    """``with_bounds``, the same text object for the same bounds: its hash, and the conversion
    of its placeholders (``db.positional``), are computed once."""
    bounds = {"limit": limit, "candidates": candidates}

    def bound(match: re.Match[str]) -> str:
        value = bounds.get(match.group(1) or "")
        return match.group(0) if value is None else str(value)

    return PLACEHOLDER_OR_PERCENT.sub(bound, statement)


# A statement's %(name)s placeholders (group 1: the name), and its escaped percent signs (``%%``;
# group 1 None), for what rewrites a statement's placeholders (``_bounded``, ``db.positional``).
PLACEHOLDER_OR_PERCENT = re.compile(r"%%|%\((\w+)\)s")

# A claim token: the worker's prefix and a random suffix.
TOKEN_FROM_WORKER = "%(token_prefix)s || replace(gen_random_uuid()::text, '-', '')"

# A claim token for a caller that gave no worker id.
TOKEN_ANONYMOUS = "gen_random_uuid()::text"
