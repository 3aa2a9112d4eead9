"""The activities' statements (submit, claim, leases, completion, durable steps, worker pools,
retention), by name, reviewed as a unit. The rest of the catalogue sits beside it by subject:
``sql_commands``, ``sql_periodic``, ``sql_reads``, ``sql_cache``, ``sql_session``.

Conventions that matter for speed and correctness:

- Statuses are SQL literals, never bind parameters: the dequeue, processing and retention
  indexes are partial, and the planner can only use a partial index when it can prove the
  predicate from the query text.
- Hot operations are one round trip each: claim and renew one statement, complete two (COMPLETE
  then WAKE, sent as one query: an implicit transaction in autocommit). A data-modifying CTE
  runs atomically on its own in autocommit, so the round trip is the transaction.
- ``pg_notify`` is called in the writing statement, so listeners hear only committed work.
- Times come from the database clock (``now()``), so rows, events and the scenarios' ``$future``
  checks agree whatever the clocks of the workers say. Lease deadlines use ``clock_timestamp()``
  so that a claim made late in a long caller transaction still gets its full lease.
- Parameters are named (``%(name)s``); JSON travels as text and is cast with ``::jsonb``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

# The statuses a claim may take, as an SQL literal (a partial index's predicate).
RUNNABLE = "('pending', 'scheduled', 'retrying', 'waiting')"
# The finished statuses, as an SQL literal.
TERMINAL = "('completed', 'failed', 'dead_letter', 'cancelled')"
# An activity's input is ours to claim when it is in a serialization we read (json-v1, the empty
# string meaning the same, and the TypeScript SDK's 'superjson-v1', decoded per row) or missing
# (read as a JSON null). Anything else -- one invented later -- is left for its SDK. Written as
# an opaque boolean on purpose: the planner has no statistics for it and assumes it keeps half the rows, while the
# same test spelt `COALESCE(serialization, 'json-v1') IN ('json-v1', '')` is assumed to keep 1%,
# which makes a claim of a large batch look cheaper as a bitmap scan plus a sort.
OUR_INPUT = """COALESCE((SELECT s.serialization IN ('json-v1', '', 'superjson-v1') FROM runnerq_inputs s
                  WHERE s.activity_id = a.id), true)"""
# The database clock in epoch milliseconds, for lease deadlines (clock_timestamp: see above).
NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
# The columns of a runnerq_results row, in the order the inserts below give them.
RESULT_COLUMNS = "(activity_id, queue_name, state, data, owner_activity_id, step, serialization)"
# A result overwrites an older row for the same id: the fenced transition that writes it is
# what makes it current (an activity retried by an operator gets a fresh result).
RESULT_UPSERT = """
    ON CONFLICT (activity_id) DO UPDATE SET state = EXCLUDED.state, data = EXCLUDED.data,
        created_at = now(), owner_activity_id = EXCLUDED.owner_activity_id, step = EXCLUDED.step,
        serialization = EXCLUDED.serialization"""
# The database clock, the one clock of the whole fleet (due-ness, lease expiry, ages).
DB_NOW = "SELECT now()"
# pg_notify payloads are limited to 8000 bytes: 200 ids of 36 characters plus commas fit.
NOTIFY_IDS_PER_MESSAGE = 200


def wake_waiters(extra_candidates: str = "", parents_of: str = "") -> str:
    """CTEs ending in ``woken``: every activity waiting on a result of the ``stored`` CTE
    (column ``result_id``) goes back to ``pending``, claimable at once.

    Waiters are found through ``runnerq_dependencies (queue_name, result_id)`` (indexed), plus
    ``extra_candidates`` (a SELECT of ids, e.g. a signal's target). The candidates are locked
    (in id order, so concurrent wakers don't deadlock on each other) *before* their status is
    read: a ``park`` in flight holds its own row, so this waits for it and then sees it
    ``waiting``.

    ``parents_of`` names a CTE of finished activities (``id``, ``parent_id``): their parents
    waiting on them wake too, even without a dependency row (another SDK's park may not have
    written one). That check is a plain conditional update: it writes nothing, and locks
    nothing, unless the parent is waiting on that very result.

    No lost wake-up: the candidates are *found* with the statement's snapshot, so a statement
    using these CTEs must start after its transaction has locked the producers whose results
    it stores (``FAIL_READ``, ``REAP_READ``, the cancel's lock, ``COMPLETE`` before ``WAKE``;
    a signal locks its target, the only activity parked on its signal id). A ``park`` share-locks
    the producer before it locks its own row and looks for the result (``PARK_PRODUCER_LOCK``):
    a park in flight makes the writer wait for its commit, so the writer's next statement sees
    the dependency row and the waiting parent; a writer in flight makes the park wait, and the
    park's next statement sees the result.
    """
    extra = f" UNION {extra_candidates}" if extra_candidates else ""
    parents = (
        f"""
woken_parents AS (
    UPDATE runnerq_activities p
    SET status = 'pending', scheduled_at = NULL
    FROM {parents_of} f
    WHERE p.id = f.parent_id AND p.status = 'waiting' AND p.waiting_result_id = f.id
      AND p.id NOT IN (SELECT id FROM woken_dependents)
    RETURNING p.id
),"""
        if parents_of
        else ""
    )
    also_parents = " UNION ALL SELECT id FROM woken_parents" if parents_of else ""
    return f"""
waiters AS (
    SELECT w.id, w.status, w.waiting_result_id
    FROM runnerq_activities w
    WHERE w.id IN (
            SELECT d.waiter_activity_id FROM runnerq_dependencies d
            WHERE d.queue_name = %(queue)s AND d.result_id IN (SELECT result_id FROM stored){extra})
      AND w.status IN ('processing', 'waiting')
    ORDER BY w.id
    FOR NO KEY UPDATE OF w
),
woken_dependents AS (
    UPDATE runnerq_activities w
    SET status = 'pending', scheduled_at = NULL
    FROM waiters x
    WHERE w.id = x.id AND x.status = 'waiting'
      AND x.waiting_result_id IN (SELECT result_id FROM stored)
    RETURNING w.id
),{parents}
woken AS (SELECT id FROM woken_dependents{also_parents})"""


# A select-list item: announce the ids of the ``stored`` CTE on the result channel, in chunks.
NOTIFY_RESULTS = f"""
    (SELECT count(*) FROM (
        SELECT pg_notify(%(result_channel)s, string_agg(n.result_id::text, ','))
        FROM (SELECT result_id, (row_number() OVER () - 1) / {NOTIFY_IDS_PER_MESSAGE} AS chunk FROM stored) n
        GROUP BY n.chunk) sent) AS results_notified"""
# A select-list item: announce work on the work channel once if the ``woken`` CTE woke any.
NOTIFY_WOKEN = (
    "(SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '') FROM woken LIMIT 1) sent) AS work_notified"
)


# -- submit -------------------------------------------------------------------------------------

# Activities arrive as one JSON array (one round trip for a batch): json null payloads become
# SQL NULL in jsonb_to_recordset, hence the COALESCE back to JSON null (0.6.0: an absent payload
# is stored as JSON null). A root is its own root; a child without an explicit root inherits its
# parent's. The fence (a spawn's parent claim) is checked in the same statement: a stale claim
# inserts nothing. So does a child whose parent is neither in the queue nor in the batch: its root
# would be an id that never finishes, and retention would keep it forever.
# SUBMIT and SUBMIT_RETURNING_EXISTING share the parts below; ``{which}`` is each statement's
# choice of the rows of ``new`` to create.
_NEW_ACTIVITIES = """
new AS (
    SELECT * FROM jsonb_to_recordset(%(activities)s::jsonb) AS x(
        ord int, id uuid, activity_type text, payload jsonb, priority int, max_retries int,
        timeout_seconds bigint, delay_seconds float8, retry_delay_seconds bigint,
        max_retry_delay_seconds bigint, metadata jsonb, idempotency_key text,
        parent_id uuid, root_id uuid, depth int2)
),"""
# The CTEs creating the chosen rows of ``new`` and their inputs.
_CREATE_ACTIVITIES = """
created AS (
    INSERT INTO runnerq_activities (
        id, queue_name, activity_type, priority, status, scheduled_at, max_retries,
        timeout_seconds, retry_delay_seconds, max_retry_delay_seconds, metadata, idempotency_key,
        parent_activity_id, root_activity_id, depth)
    SELECT x.id, %(queue)s, x.activity_type, x.priority,
           CASE WHEN x.delay_seconds > 0 THEN 'scheduled' ELSE 'pending' END,
           CASE WHEN x.delay_seconds > 0 THEN now() + make_interval(secs => x.delay_seconds) END,
           x.max_retries, x.timeout_seconds, x.retry_delay_seconds, x.max_retry_delay_seconds,
           x.metadata, x.idempotency_key, x.parent_id,
           CASE WHEN x.parent_id IS NULL THEN x.id
                ELSE COALESCE(x.root_id,
                              (SELECT p.root_activity_id FROM runnerq_activities p WHERE p.id = x.parent_id),
                              x.parent_id) END,
           x.depth
    {which}
    ORDER BY x.ord
    RETURNING id, status
),
inputs AS (
    INSERT INTO runnerq_inputs (activity_id, queue_name, payload, serialization)
    SELECT x.id, %(queue)s, COALESCE(x.payload, 'null'::jsonb), 'json-v1'
    FROM new x WHERE x.id IN (SELECT id FROM created)
)"""
# Announce work once if a created activity is runnable at once.
_NOTIFY_CREATED = """(SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '')
                              FROM created WHERE status = 'pending' LIMIT 1) sent)"""
# Submit a batch of activities (fenced by a spawning parent's claim when there is one).
SUBMIT = (
    """
WITH fence AS (
    SELECT count(*) > 0 AS live FROM runnerq_activities f
    WHERE f.id = %(fence_id)s::uuid AND f.queue_name = %(queue)s
      AND f.status = 'processing' AND f.current_worker_id = %(fence_token)s
),
"""
    + _NEW_ACTIVITIES
    + """
orphan AS (
    SELECT x.parent_id FROM new x
    WHERE x.parent_id IS NOT NULL AND x.parent_id NOT IN (SELECT id FROM new)
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities p WHERE p.id = x.parent_id AND p.queue_name = %(queue)s)
    LIMIT 1
),"""
    + _CREATE_ACTIVITIES.replace(
        "{which}",
        """FROM new x, fence
    WHERE (fence.live OR %(fence_id)s::uuid IS NULL) AND NOT EXISTS (SELECT 1 FROM orphan)""",
    )
    + """
SELECT (SELECT count(*) FROM created) AS created,
       (SELECT live FROM fence) AS fence_live,
       """
    + _NOTIFY_CREATED
    + """ AS work_notified,
       (SELECT parent_id FROM orphan) AS unknown_parent
"""
)

# A batch of root activities whose idempotency keys all follow return_existing (enqueue_many's
# usual case), in one statement: take the keys (in key order, byte order as Python sorts them,
# so concurrent batches sharing keys wait for each other without a deadlock), create the
# activities without a key and those whose key was taken, and report per row whether it was
# created, or the key's holder and its status.
#
# The holders are read with the statement's snapshot (READ COMMITTED), which does not see a key
# that a concurrent transaction committed while this statement ran (ON CONFLICT waited for it,
# then did nothing): such a row reports no holder, and the caller resolves it with the per-key
# statements, whose snapshots do see it. So does a holder whose activity is gone. A key repeated
# within the batch must be sent once (a later row could not see the earlier one's key row).
SUBMIT_RETURNING_EXISTING = (
    """
WITH"""
    + _NEW_ACTIVITIES
    + """
taken AS (
    INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id)
    SELECT %(queue)s, x.idempotency_key, x.id FROM new x
    WHERE x.idempotency_key IS NOT NULL
    ORDER BY x.idempotency_key COLLATE "C"
    ON CONFLICT (queue_name, idempotency_key) DO NOTHING
    RETURNING activity_id
),"""
    + _CREATE_ACTIVITIES.replace(
        "{which}",
        """FROM new x
    WHERE x.idempotency_key IS NULL OR x.id IN (SELECT activity_id FROM taken)""",
    )
    + """,
notified AS (SELECT """
    + _NOTIFY_CREATED
    + """ AS n)
SELECT x.ord, x.id IN (SELECT id FROM created) AS created, k.activity_id AS holder_id,
       a.status AS holder_status, (SELECT n FROM notified) AS work_notified
FROM new x
LEFT JOIN runnerq_idempotency k
       ON k.queue_name = %(queue)s AND k.idempotency_key = x.idempotency_key
      AND x.id NOT IN (SELECT activity_id FROM taken)
LEFT JOIN runnerq_activities a ON a.id = k.activity_id
ORDER BY x.ord
"""
)


# One root activity without a key or fence: the common enqueue. A plain statement that the
# server prepares once per connection (planning SUBMIT's CTEs costs more than running them).
SUBMIT_ROOT = """
WITH created AS (
    INSERT INTO runnerq_activities (
        id, queue_name, activity_type, priority, status, scheduled_at, max_retries,
        timeout_seconds, retry_delay_seconds, max_retry_delay_seconds, metadata,
        root_activity_id, depth)
    VALUES (%(id)s, %(queue)s, %(activity_type)s, %(priority)s,
            CASE WHEN %(delay_seconds)s::float8 > 0 THEN 'scheduled' ELSE 'pending' END,
            CASE WHEN %(delay_seconds)s::float8 > 0 THEN now() + make_interval(secs => %(delay_seconds)s::float8) END,
            %(max_retries)s, %(timeout_seconds)s, %(retry_delay_seconds)s, %(max_retry_delay_seconds)s,
            %(metadata)s::jsonb, %(id)s, 0)
    RETURNING id, status
),
inputs AS (
    INSERT INTO runnerq_inputs (activity_id, queue_name, payload, serialization)
    SELECT id, %(queue)s, %(payload)s::jsonb, 'json-v1' FROM created
)
SELECT (SELECT pg_notify(%(work_channel)s, '') FROM created WHERE status = 'pending') IS NOT NULL
"""

# enqueue_many's batch: root activities that share every option but their id, payload and key
# (``submit.submit_uniform``). The options are parameters given once; the ids, payloads (checked
# JSON text) and keys are arrays sent in binary, unnested together, so the statement is planned
# once per connection and psycopg dumps an array in C, not a JSON document in Python. The rows
# are those SUBMIT and SUBMIT_RETURNING_EXISTING write for the same activities.
_UNIFORM_ROWS = """
x AS (
    SELECT * FROM unnest(%(ords)b::int4[], %(ids)b::uuid[], %(keys)b::text[], %(payloads)b::text[])
        AS x(ord, id, idempotency_key, payload)
),"""
# The CTEs creating the chosen rows of ``x`` and their inputs (``{which}``: the statement's choice).
_UNIFORM_CREATE = """
created AS (
    INSERT INTO runnerq_activities (
        id, queue_name, activity_type, priority, status, scheduled_at, max_retries,
        timeout_seconds, retry_delay_seconds, max_retry_delay_seconds, metadata, idempotency_key,
        parent_activity_id, root_activity_id, depth)
    SELECT x.id, %(queue)s, %(activity_type)s, %(priority)s,
           CASE WHEN %(delay_seconds)s::float8 > 0 THEN 'scheduled' ELSE 'pending' END,
           CASE WHEN %(delay_seconds)s::float8 > 0 THEN now() + make_interval(secs => %(delay_seconds)s::float8) END,
           %(max_retries)s, %(timeout_seconds)s, %(retry_delay_seconds)s, %(max_retry_delay_seconds)s,
           %(metadata)s::jsonb, x.idempotency_key, NULL, x.id, 0
    FROM x {which}
    ORDER BY x.ord
    RETURNING id, status
),
inputs AS (
    INSERT INTO runnerq_inputs (activity_id, queue_name, payload, serialization)
    SELECT x.id, %(queue)s, x.payload::jsonb, 'json-v1' FROM x {inputs_which}
)"""
# Without keys: every row is created (a reused id fails the statement: Conflict).
SUBMIT_UNIFORM = (
    "WITH"
    + _UNIFORM_ROWS
    + _UNIFORM_CREATE.replace("{which}", "").replace("{inputs_which}", "")
    + """
SELECT (SELECT count(*) FROM created) AS created, """
    + _NOTIFY_CREATED
    + """ AS work_notified
"""
)
# With return_existing keys (the keys in key order, as SUBMIT_RETURNING_EXISTING takes them): the
# first row carries the notification; then one row per activity *not* created, with the key's
# holder and its status when this statement's snapshot sees them (the caller resolves the rest
# with the per-key statements, as after SUBMIT_RETURNING_EXISTING). A fresh batch returns one row.
SUBMIT_UNIFORM_RETURNING_EXISTING = (
    "WITH"
    + _UNIFORM_ROWS
    + """
taken AS (
    INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id)
    SELECT %(queue)s, x.idempotency_key, x.id FROM x
    WHERE x.idempotency_key IS NOT NULL
    ORDER BY x.idempotency_key COLLATE "C"
    ON CONFLICT (queue_name, idempotency_key) DO NOTHING
    RETURNING activity_id
),"""
    + _UNIFORM_CREATE.replace(
        "{which}", "WHERE x.idempotency_key IS NULL OR x.id IN (SELECT activity_id FROM taken)"
    ).replace("{inputs_which}", "WHERE x.id IN (SELECT id FROM created)")
    + """
SELECT NULL::int4 AS ord, NULL::uuid AS holder_id, NULL::text AS holder_status, """
    + _NOTIFY_CREATED
    + """ AS work_notified
UNION ALL
(SELECT x.ord, k.activity_id, a.status, NULL
 FROM x
 LEFT JOIN runnerq_idempotency k ON k.queue_name = %(queue)s AND k.idempotency_key = x.idempotency_key
 LEFT JOIN runnerq_activities a ON a.id = k.activity_id
 WHERE x.id NOT IN (SELECT id FROM created)
 ORDER BY x.ord)
"""
)

# SUBMIT_ROOT with positional, typed parameters, as db.fetch_value_in_autocommit runs it (their
# order: SUBMIT_ROOT_PARAMS). The same statement: each %(name)s becomes its $n, cast to the type
# the column (or the cast already there) gives it.
SUBMIT_ROOT_PARAMS = (
    ("id", "uuid"),
    ("queue", "text"),
    ("activity_type", "text"),
    ("priority", "int4"),
    ("delay_seconds", "float8"),
    ("max_retries", "int4"),
    ("timeout_seconds", "int8"),
    ("retry_delay_seconds", "int8"),
    ("max_retry_delay_seconds", "int8"),
    ("metadata", "jsonb"),
    ("payload", "jsonb"),
    ("work_channel", "text"),
)


def _positional(statement: str, names: tuple[tuple[str, str], ...]) -> str:
    """``statement`` with each ``%(name)s`` (and the cast after it, if any) as ``$n::type``."""
    for number, (name, type_) in enumerate(names, 1):
        for cast in ("::float8", "::jsonb"):
            statement = statement.replace(f"%({name})s{cast}", f"%({name})s")
        statement = statement.replace(f"%({name})s", f"${number}::{type_}")
    if "%(" in statement:
        raise ValueError(f"a parameter has no position: {statement}")
    return statement


# SUBMIT_ROOT, positional (db.fetch_value_in_autocommit).
SUBMIT_ROOT_POSITIONAL = _positional(SUBMIT_ROOT, SUBMIT_ROOT_PARAMS)

# Whether a spawning parent still holds its claim (the fence of a submit).
FENCE_IS_LIVE = """
SELECT 1 FROM runnerq_activities
WHERE id = %(fence_id)s AND queue_name = %(queue)s AND status = 'processing' AND current_worker_id = %(fence_token)s
"""

# Idempotency keys: take the key, or find who holds it. A concurrent holder makes this wait for
# its commit (unique index), so two submits of one key never both create.
TAKE_KEY = """
INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id)
VALUES (%(queue)s, %(key)s, %(id)s)
ON CONFLICT (queue_name, idempotency_key) DO NOTHING
RETURNING activity_id
"""

# The activity holding an idempotency key, locked, with its status and parent.
KEY_HOLDER = """
SELECT k.activity_id, a.status, a.parent_activity_id
FROM runnerq_idempotency k
LEFT JOIN runnerq_activities a ON a.id = k.activity_id
WHERE k.queue_name = %(queue)s AND k.idempotency_key = %(key)s
FOR UPDATE OF k
"""

# Point an idempotency key at another activity (its holder is gone or finished).
REPOINT_KEY = """
UPDATE runnerq_idempotency SET activity_id = %(id)s, updated_at = now()
WHERE queue_name = %(queue)s AND idempotency_key = %(key)s
"""

# One spec event of an activity.
INSERT_EVENT = """
INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
VALUES (%(id)s, %(queue)s, %(event_type)s, %(worker_id)s, %(detail)s::jsonb)
"""

# The activity holding an idempotency key (unlocked).
LOOKUP_KEY = """
SELECT activity_id FROM runnerq_idempotency WHERE queue_name = %(queue)s AND idempotency_key = %(key)s
"""


# -- claim --------------------------------------------------------------------------------------

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


# -- leases -------------------------------------------------------------------------------------

# Only lease_deadline_ms changes, which no index keys or predicates mention: a HOT update that
# writes no index entries. GREATEST: a renewal never shortens a lease.
#
# A HOT update needs room on the row's page for the new version, and versions made earlier in
# the same transaction can't be pruned to make it. Claimed rows sit close together (a batch
# claim writes them side by side), so renewing a batch in one statement overflows their pages
# and turns most renewals into full updates. RENEW_ONE is the statement of one renewal;
# renew_many sends one transaction per renewal in a single round trip (BEGIN; ...; COMMIT; ...),
# so that each renewal prunes the version the previous one left. RENEW is the one-statement
# form, for callers already inside a transaction.
RENEW_ONE = f"""
UPDATE runnerq_activities
SET lease_deadline_ms = GREATEST(lease_deadline_ms, {NOW_MS} + %(lease_ms)s)
WHERE id = %({{id}})s AND queue_name = %(queue)s AND status = 'processing' AND current_worker_id = %({{token}})s
RETURNING id
"""


@functools.lru_cache(maxsize=64)
def renew_each(count: int) -> str:
    """RENEW_ONE for ``count`` claims (``%(id_N)s``, ``%(token_N)s``), each in a transaction of its
    own, as one string: one round trip."""
    return "".join(
        [
            "BEGIN;" + RENEW_ONE.format(id=f"id_{index}", token=f"token_{index}") + ";COMMIT;"
            for index in range(count)
        ]
    )


# Renew a batch of leases in one statement (inside a caller's transaction).
RENEW = f"""
UPDATE runnerq_activities a
SET lease_deadline_ms = GREATEST(a.lease_deadline_ms, {NOW_MS} + %(lease_ms)s)
FROM unnest(%(ids)s::uuid[], %(tokens)s::text[]) AS c(id, token)
WHERE a.id = c.id AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = c.token
RETURNING a.id
"""

# Graceful shutdown: the attempt never ran to an end, so no attempt is counted and no event is
# written; the activity is claimable again at once.
RELEASE = """
WITH released AS (
    UPDATE runnerq_activities a
    SET status = 'pending', last_worker_id = a.current_worker_id, current_worker_id = NULL,
        lease_deadline_ms = NULL, started_at = NULL
    FROM unnest(%(ids)s::uuid[], %(tokens)s::text[]) AS c(id, token)
    WHERE a.id = c.id AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = c.token
    RETURNING a.id
)
SELECT (SELECT count(*) FROM released),
       (SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '') FROM released LIMIT 1) sent)
"""


# -- complete -----------------------------------------------------------------------------------

# A batch of acks: this statement, then WAKE in the same transaction (one round trip). An ack
# whose claim no longer owns the activity changes nothing. The first row announces the results
# (its last column); then one row per ack that completed nothing, telling a lost reply's repeat
# (completed under the same token with an equal value: fine) from a different value (a conflict)
# and from a lost claim (NULL). Only those acks are looked up (the lookup was two index reads per
# acknowledged row), and only they come back (reading a row per ack, its id a UUID object, was a
# tenth of the worker's Python around a completion). The waiters are woken by WAKE, not here: this statement's
# snapshot predates the locks it takes on the completed rows, so a park that held one of them
# (and committed meanwhile) is invisible to it; WAKE's snapshot is taken after.
COMPLETE = f"""
WITH acks AS (
    SELECT * FROM jsonb_to_recordset(%(acks)s::jsonb) AS x(id uuid, token text, value jsonb)
),
done AS (
    UPDATE runnerq_activities a
    SET status = 'completed', completed_at = now(), last_worker_id = a.current_worker_id,
        current_worker_id = NULL, lease_deadline_ms = NULL
    FROM acks x
    WHERE a.id = x.id AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = x.token
    RETURNING a.id, COALESCE(x.value, 'null'::jsonb) AS value
),
stored AS (
    INSERT INTO runnerq_results {RESULT_COLUMNS}
    SELECT d.id, %(queue)s, 'Ok', d.value, d.id, NULL, 'json-v1' FROM done d
    {RESULT_UPSERT}
    RETURNING activity_id AS result_id
)
SELECT NULL::uuid AS id, NULL::boolean AS repeat_same_value, {NOTIFY_RESULTS}
UNION ALL
SELECT x.id,
       (SELECT COALESCE(r.data, 'null'::jsonb) = COALESCE(x.value, 'null'::jsonb)
        FROM runnerq_activities a JOIN runnerq_results r ON r.activity_id = a.id
        WHERE a.id = x.id AND a.queue_name = %(queue)s AND a.status = 'completed'
          AND a.last_worker_id = x.token AND r.state = 'Ok'),
       NULL
FROM acks x WHERE x.id NOT IN (SELECT id FROM done)
"""

# Wake every activity waiting on one of the activities %(ids)s whose result is stored (their
# waiters through runnerq_dependencies, and their parents parked on them without a dependency
# row), and announce the woken work. Run after the results were written and the activities
# locked, earlier in the same transaction (see wake_waiters); waking on a stored result is
# always right, so ids whose result was stored earlier are harmless. The ids go in binary
# (psycopg's text array of 32 UUIDs took 29 us to make, its binary one 6).
WAKE = f"""
WITH stored AS (
    SELECT r.activity_id AS result_id FROM runnerq_results r
    WHERE r.activity_id = ANY(%(ids)b::uuid[]) AND r.queue_name = %(queue)s
),
finished AS (
    SELECT a.id, a.parent_activity_id AS parent_id FROM runnerq_activities a
    WHERE a.id IN (SELECT result_id FROM stored) AND a.parent_activity_id IS NOT NULL
),
{wake_waiters(parents_of="finished")}
SELECT (SELECT count(*) FROM woken) AS woken, {NOTIFY_WOKEN}
"""


# -- fail ---------------------------------------------------------------------------------------

# Read (and lock) what the retry decision needs. A lost reply's repeat is recognised by the
# event the first call wrote under this token.
FAIL_READ = """
SELECT a.status = 'processing' AND a.current_worker_id = %(token)s AS live,
       a.retry_count, a.max_retries, a.retry_delay_seconds, a.max_retry_delay_seconds,
       a.started_at, now(),
       (SELECT e.event_type FROM runnerq_events e
        WHERE e.activity_id = a.id AND e.worker_id = %(token)s
          AND e.event_type IN ('Retrying', 'Failed', 'DeadLetter')
        ORDER BY e.created_at DESC LIMIT 1) AS earlier_outcome
FROM runnerq_activities a
WHERE a.id = %(id)s AND a.queue_name = %(queue)s
FOR NO KEY UPDATE
"""

# retry_count plus one attempt, stopping at the int4 maximum: another writer may have stored
# that maximum (with unlimited attempts), and one more was "integer out of range", which left the
# failure unrecorded and made every reap of the queue fail, its other expired leases included.
NEXT_RETRY_COUNT = "LEAST(retry_count, 2147483646) + 1"

# A failure with attempts left: back to retrying after the backoff, with a Retrying event.
FAIL_RETRY = f"""
WITH moved AS (
    UPDATE runnerq_activities
    SET status = 'retrying', retry_count = {NEXT_RETRY_COUNT}, last_error = %(error)s, last_error_at = now(),
        scheduled_at = %(scheduled_at)s, last_worker_id = current_worker_id, current_worker_id = NULL,
        lease_deadline_ms = NULL
    WHERE id = %(id)s AND queue_name = %(queue)s AND status = 'processing' AND current_worker_id = %(token)s
    RETURNING id, scheduled_at <= now() AS due
),
event AS (
    INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
    SELECT id, %(queue)s, 'Retrying', %(token)s, %(detail)s::jsonb FROM moved
)
SELECT (SELECT count(*) FROM moved),
       (SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '') FROM moved WHERE due) sent)
"""

# failed (non-retryable) or dead_letter (attempts exhausted): an Err result that wakes waiters.
FAIL_TERMINAL = f"""
WITH moved AS (
    UPDATE runnerq_activities
    SET status = %(status)s, completed_at = now(), last_error = %(error)s, last_error_at = now(),
        last_worker_id = current_worker_id, current_worker_id = NULL, lease_deadline_ms = NULL
    WHERE id = %(id)s AND queue_name = %(queue)s AND status = 'processing' AND current_worker_id = %(token)s
    RETURNING id, parent_activity_id AS parent_id
),
event AS (
    INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
    SELECT id, %(queue)s, %(event_type)s, %(token)s, %(detail)s::jsonb FROM moved
),
stored AS (
    INSERT INTO runnerq_results {RESULT_COLUMNS}
    SELECT id, %(queue)s, 'Err', %(data)s::jsonb, id, NULL, 'json-v1' FROM moved
    {RESULT_UPSERT}
    RETURNING activity_id AS result_id
),
{wake_waiters(parents_of="moved")}
SELECT (SELECT count(*) FROM moved), {NOTIFY_RESULTS}, {NOTIFY_WOKEN}
"""


# -- reaper -------------------------------------------------------------------------------------

# idx_runnerq_processing (queue_name) WHERE status = 'processing' serves this; SKIP LOCKED lets
# several reapers (and the owners' own acks) proceed without waiting on each other. started_at
# (another SDK's claim wrote it) comes as text, decoded per row: one that Python can't read must
# not stop the reaping of the whole queue.
REAP_READ = f"""
SELECT a.id, a.current_worker_id, a.retry_count, a.max_retries, a.started_at::text, now()
FROM runnerq_activities a
WHERE a.queue_name = %(queue)s AND a.status = 'processing' AND a.lease_deadline_ms < {NOW_MS}
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# The decisions come back as one JSON array: requeue (a retryable failure without backoff) or
# dead-letter (the last attempt's lease expired), each with its event detail.
REAP_APPLY = f"""
WITH decided AS (
    SELECT * FROM jsonb_to_recordset(%(decisions)s::jsonb)
        AS d(id uuid, token text, dead boolean, detail jsonb, data jsonb)
),
requeued AS (
    UPDATE runnerq_activities a
    SET status = 'pending', retry_count = {NEXT_RETRY_COUNT}, last_worker_id = a.current_worker_id,
        current_worker_id = NULL, lease_deadline_ms = NULL, started_at = NULL,
        last_error = %(error)s, last_error_at = now()
    FROM decided d
    WHERE a.id = d.id AND NOT d.dead AND a.queue_name = %(queue)s
      AND a.status = 'processing' AND a.current_worker_id = d.token
    RETURNING a.id
),
dead AS (
    UPDATE runnerq_activities a
    SET status = 'dead_letter', completed_at = now(), last_worker_id = a.current_worker_id,
        current_worker_id = NULL, lease_deadline_ms = NULL, last_error = %(error)s, last_error_at = now()
    FROM decided d
    WHERE a.id = d.id AND d.dead AND a.queue_name = %(queue)s
      AND a.status = 'processing' AND a.current_worker_id = d.token
    RETURNING a.id, a.parent_activity_id AS parent_id, d.data
),
events AS (
    INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
    SELECT d.id, %(queue)s, CASE WHEN d.dead THEN 'DeadLetter' ELSE 'Requeued' END, d.token, d.detail
    FROM decided d
    WHERE d.id IN (SELECT id FROM requeued) OR d.id IN (SELECT id FROM dead)
),
stored AS (
    INSERT INTO runnerq_results {RESULT_COLUMNS}
    SELECT id, %(queue)s, 'Err', data, id, NULL, 'json-v1' FROM dead
    {RESULT_UPSERT}
    RETURNING activity_id AS result_id
),
{wake_waiters(parents_of="dead")}
SELECT (SELECT count(*) FROM requeued) + (SELECT count(*) FROM dead),
       {NOTIFY_RESULTS},
       (SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '')
                              FROM (SELECT id FROM requeued UNION ALL SELECT id FROM woken) w LIMIT 1) sent)
"""


# -- durable execution --------------------------------------------------------------------------

# Store a durable step's checkpoint if the claim is live, waking its waiters.
CHECKPOINT = f"""
WITH owner AS (
    SELECT a.id FROM runnerq_activities a
    WHERE a.id = %(id)s AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = %(token)s
),
stored AS (
    INSERT INTO runnerq_results {RESULT_COLUMNS}
    SELECT %(result_id)s, %(queue)s, %(state)s, %(data)s::jsonb, id, %(step)s, 'json-v1' FROM owner
    ON CONFLICT (activity_id) DO NOTHING
    RETURNING activity_id AS result_id
),
{wake_waiters()}
SELECT EXISTS (SELECT 1 FROM owner) AS owned,
       EXISTS (SELECT 1 FROM stored) AS written,
       {NOTIFY_WOKEN}
"""

# Checkpoints are immutable: the same outcome again is a no-op, a different one a conflict.
CHECKPOINT_SAME = """
SELECT r.state = %(state)s AND COALESCE(r.data, 'null'::jsonb) = %(data)s::jsonb
FROM runnerq_results r WHERE r.activity_id = %(result_id)s
"""

# Record that a live claim waits on a result (the waking rule's index).
REGISTER_DEPENDENCY = """
WITH waiter AS (
    SELECT a.id FROM runnerq_activities a
    WHERE a.id = %(id)s AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = %(token)s
),
producer AS (
    SELECT p.id FROM runnerq_activities p WHERE p.id = %(producer)s AND p.queue_name = %(queue)s
),
registered AS (
    INSERT INTO runnerq_dependencies (queue_name, waiter_activity_id, result_id, producer_activity_id)
    SELECT %(queue)s, waiter.id, producer.id, producer.id FROM waiter, producer
    ON CONFLICT DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM waiter), EXISTS (SELECT 1 FROM producer)
"""

# Record that a live claim waits on several results at once (a wait on many children): one row
# per producer, as REGISTER_DEPENDENCY writes them. Returns whether the claim is live and the
# producers found in the queue (the caller names the missing ones).
REGISTER_DEPENDENCIES = """
WITH waiter AS (
    SELECT a.id FROM runnerq_activities a
    WHERE a.id = %(id)s AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = %(token)s
),
producers AS (
    SELECT p.id FROM runnerq_activities p WHERE p.id = ANY(%(producers)s::uuid[]) AND p.queue_name = %(queue)s
),
registered AS (
    INSERT INTO runnerq_dependencies (queue_name, waiter_activity_id, result_id, producer_activity_id)
    SELECT %(queue)s, waiter.id, producers.id, producers.id FROM waiter, producers
    ORDER BY producers.id
    ON CONFLICT DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM waiter), ARRAY(SELECT id FROM producers)
"""

# park, statement 0 (signal and await): share-lock the producer of the awaited result. Every
# writer of an activity's own result (complete, fail, the reaper, cancel) updates that row
# first, so a completion in flight makes the park wait for its commit, and a completion that
# comes later waits for ours. Taken before our own row: writers lock the producer, then waiters.
PARK_PRODUCER_LOCK = """
SELECT 1 FROM runnerq_activities
WHERE id = ANY(ARRAY[%(result_id)s::uuid, %(producer)s::uuid])
ORDER BY id
FOR SHARE
"""

# park, statement 1: lock our own row before looking for the awaited result. A waker that got
# there first holds the row until it commits, so statement 2 (a new snapshot) sees its result;
# a waker that comes later waits for our commit and then sees the row waiting (wake_waiters).
PARK_LOCK = """
SELECT a.status = 'processing' AND a.current_worker_id = %(token)s AS live, a.status, a.started_at,
       EXISTS (SELECT 1 FROM runnerq_events e
               WHERE e.activity_id = a.id AND e.event_type = 'Yielded' AND e.worker_id = %(token)s) AS parked_before
FROM runnerq_activities a
WHERE a.id = %(id)s AND a.queue_name = %(queue)s
FOR NO KEY UPDATE
"""

# park, statement 2: waiting (on the result, or until wake_at) unless the result is already
# there, in which case the activity stays runnable. Either way the claim ends without counting
# an attempt, and one Yielded event records it.
PARK = """
WITH ready AS (
    SELECT EXISTS (SELECT 1 FROM runnerq_results r WHERE r.activity_id = %(result_id)s::uuid) AS ready
),
parked AS (
    UPDATE runnerq_activities a
    SET status = CASE WHEN ready.ready THEN 'pending' ELSE 'waiting' END,
        scheduled_at = CASE WHEN ready.ready THEN NULL ELSE %(wake_at)s::timestamptz END,
        waiting_result_id = CASE WHEN ready.ready THEN NULL ELSE %(result_id)s::uuid END,
        last_worker_id = a.current_worker_id, current_worker_id = NULL, lease_deadline_ms = NULL
    FROM ready
    WHERE a.id = %(id)s AND a.queue_name = %(queue)s AND a.status = 'processing' AND a.current_worker_id = %(token)s
    RETURNING a.id, ready.ready, ready.ready OR a.scheduled_at <= now() AS runnable
),
event AS (
    INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
    SELECT id, %(queue)s, 'Yielded', %(token)s,
           CASE WHEN ready THEN %(detail_ready)s::jsonb ELSE %(detail_waiting)s::jsonb END
    FROM parked
),
dependency AS (
    INSERT INTO runnerq_dependencies (queue_name, waiter_activity_id, result_id, producer_activity_id)
    SELECT %(queue)s, id, %(result_id)s::uuid, %(producer)s::uuid FROM parked
    WHERE NOT ready AND %(producer)s::uuid IS NOT NULL
    ON CONFLICT DO NOTHING
)
SELECT p.ready,
       (SELECT count(*) FROM (SELECT pg_notify(%(work_channel)s, '') FROM parked WHERE runnable) sent)
FROM parked p
"""

# A signal is not fenced and not idempotent: the last one wins. The target row is locked first
# (a park in flight finishes before the signal looks at its status).
SIGNAL = f"""
WITH target AS (
    SELECT a.id FROM runnerq_activities a
    WHERE a.id = %(target)s AND a.queue_name = %(queue)s
    FOR NO KEY UPDATE
),
stored AS (
    INSERT INTO runnerq_results {RESULT_COLUMNS}
    SELECT %(signal_id)s, %(queue)s, 'Ok', %(payload)s::jsonb, id, %(step)s, 'json-v1' FROM target
    {RESULT_UPSERT}
    RETURNING activity_id AS result_id
),
{wake_waiters("SELECT id FROM target")},
event AS (
    INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
    SELECT t.id, %(queue)s, 'Signaled', NULL,
           CASE WHEN t.id IN (SELECT id FROM woken) THEN %(detail_woke)s::jsonb ELSE %(detail_kept)s::jsonb END
    FROM target t
)
SELECT EXISTS (SELECT 1 FROM target) AS found,
       EXISTS (SELECT 1 FROM woken WHERE id = %(target)s) AS woke,
       {NOTIFY_WOKEN}
"""


# -- reads --------------------------------------------------------------------------------------

# The results with the given ids in a queue.
GET_RESULTS = """
SELECT activity_id, state, data::text, serialization, step
FROM runnerq_results
WHERE activity_id = ANY(%(ids)s::uuid[]) AND queue_name = %(queue)s
"""

# idx_runnerq_results_by_owner; the activity's own result (step NULL) is not a checkpoint.
LIST_CHECKPOINTS = """
SELECT activity_id, state, data::text, serialization, step
FROM runnerq_results
WHERE owner_activity_id = %(owner)s AND queue_name = %(queue)s AND step IS NOT NULL
ORDER BY created_at, activity_id
"""


# -- worker pools -------------------------------------------------------------------------------

# One row per worker process and queue (runnerq_worker_pools), kept alive by heartbeat.
POOL_REGISTER = """
INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, activity_types)
VALUES (%(pool_id)s, %(queue)s, %(max_workers)s, %(activity_types)s)
ON CONFLICT (pool_id) DO UPDATE
   SET queue_name = EXCLUDED.queue_name, max_workers = EXCLUDED.max_workers,
       activity_types = EXCLUDED.activity_types, last_seen_at = now()
"""

# Keep pool rows alive; returns the ids still registered.
POOL_HEARTBEAT = """
UPDATE runnerq_worker_pools SET last_seen_at = now() WHERE pool_id = ANY(%(ids)s::uuid[]) RETURNING pool_id
"""

# Remove pool rows on a clean shutdown; how many went.
POOL_DEREGISTER = """
WITH gone AS (DELETE FROM runnerq_worker_pools WHERE pool_id = ANY(%(ids)s::uuid[]) RETURNING 1)
SELECT count(*) FROM gone
"""

# Remove pool rows not seen for a while (dead workers); how many went.
POOL_PRUNE = """
WITH gone AS (
    DELETE FROM runnerq_worker_pools WHERE last_seen_at < now() - make_interval(secs => %(seconds)s) RETURNING 1
)
SELECT count(*) FROM gone
"""

# idx_runnerq_worker_pools_queue_alive (queue_name, last_seen_at).
POOL_CAPACITY = """
SELECT queue_name, count(*), coalesce(sum(max_workers), 0)
FROM runnerq_worker_pools
WHERE last_seen_at >= now() - make_interval(secs => %(seconds)s)
GROUP BY queue_name
"""


# -- retention ----------------------------------------------------------------------------------

# The retention classes: each finished status of a root, with the window parameter it ages with.
RETENTION_CLASSES = (
    ("completed", "completed_s"),
    ("failed", "failed_s"),
    ("dead_letter", "failed_s"),
    ("cancelled", "failed_s"),
)


def _past_window(status: str, window: str) -> str:
    """Roots ``r`` of one status finished longer ago than ``window`` (idx_runnerq_root_terminal)."""
    return f"""r.queue_name = %(queue)s AND r.parent_activity_id IS NULL AND r.status = '{status}'
          AND r.completed_at < now() - make_interval(secs => %({window})s)"""


def count_past_window(windows: list[str]) -> str:
    """How many finished roots are past the given windows (``completed_s``, ``failed_s``), kept
    roots included: the upper bound a retention dry run reports."""
    return "SELECT " + " + ".join(
        f"(SELECT count(*) FROM runnerq_activities r WHERE {_past_window(status, window)})"
        for status, window in RETENTION_CLASSES
        if window in windows
    )


def _eligible_roots(status: str, window: str) -> str:
    """Finished roots of one status older than ``window``, oldest first, through
    ``idx_runnerq_root_terminal`` (queue, status, completed_at). A root stays while any
    descendant is unfinished, or while a live activity outside awaits one of its members (the
    "pinned" rule: ``producer_activity_id = result_id`` rows of ``runnerq_dependencies``)."""
    return f"""
    SELECT * FROM (
        SELECT r.id FROM runnerq_activities r
        WHERE {_past_window(status, window)}
          AND NOT EXISTS (
              SELECT 1 FROM runnerq_activities c
              WHERE c.root_activity_id = r.id AND c.parent_activity_id IS NOT NULL
                AND c.status NOT IN {TERMINAL})
          AND NOT EXISTS (
              SELECT 1 FROM runnerq_activities m
              JOIN runnerq_dependencies d
                ON d.queue_name = %(queue)s AND d.result_id = m.id AND d.producer_activity_id = m.id
              JOIN runnerq_activities w ON w.id = d.waiter_activity_id
              WHERE (m.id = r.id OR (m.root_activity_id = r.id AND m.parent_activity_id IS NOT NULL))
                AND w.status NOT IN {TERMINAL})
        ORDER BY r.completed_at
        LIMIT %(batch)s
        FOR UPDATE OF r SKIP LOCKED
    ) s"""


def cleanup_trees(completed: bool, failed: bool) -> str:
    """Delete up to ``batch`` finished trees and everything they own, in one statement.

    ``completed``/``failed`` say which retention classes are on (a window of 0 turns its class
    off); ``dead_letter`` and ``cancelled`` roots age with the failed window.
    """
    on = {"completed_s": completed, "failed_s": failed}
    branches = [_eligible_roots(status, window) for status, window in RETENTION_CLASSES if on[window]]
    union = "\n    UNION ALL\n".join(branches)
    return f"""
WITH roots AS (
    SELECT id FROM ({union}
    ) eligible
    LIMIT %(batch)s
),
members AS (
    SELECT a.id, a.idempotency_key FROM runnerq_activities a WHERE a.id IN (SELECT id FROM roots)
    UNION ALL
    SELECT c.id, c.idempotency_key FROM runnerq_activities c
    WHERE c.root_activity_id IN (SELECT id FROM roots) AND c.parent_activity_id IS NOT NULL
),
activities AS (DELETE FROM runnerq_activities WHERE id IN (SELECT id FROM members)),
inputs AS (DELETE FROM runnerq_inputs WHERE activity_id IN (SELECT id FROM members)),
events AS (DELETE FROM runnerq_events WHERE activity_id IN (SELECT id FROM members)),
results AS (
    DELETE FROM runnerq_results
    WHERE activity_id IN (SELECT id FROM members) OR owner_activity_id IN (SELECT id FROM members)
),
dependencies AS (
    DELETE FROM runnerq_dependencies
    WHERE queue_name = %(queue)s
      AND (waiter_activity_id IN (SELECT id FROM members) OR result_id IN (SELECT id FROM members))
),
keys AS (
    DELETE FROM runnerq_idempotency k USING members m
    WHERE k.queue_name = %(queue)s AND k.idempotency_key = m.idempotency_key AND k.activity_id = m.id
)
SELECT count(*) FROM roots
"""


# The events window: events of finished (or deleted) activities older than the window, oldest
# first along idx_runnerq_events_queue_seq. Event ids grow with time, so the scan stops at the
# first event younger than the window (the horizon) instead of walking the queue's whole history.
CLEANUP_EVENTS = f"""
WITH horizon AS (
    SELECT COALESCE((
        SELECT e.id FROM runnerq_events e
        WHERE e.queue_name = %(queue)s AND e.created_at >= now() - make_interval(secs => %(events_s)s)
        ORDER BY e.id LIMIT 1), 9223372036854775807) AS id
),
doomed AS (
    SELECT e.id FROM runnerq_events e, horizon h
    WHERE e.queue_name = %(queue)s AND e.id < h.id
      AND e.created_at < now() - make_interval(secs => %(events_s)s)
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities a
                      WHERE a.id = e.activity_id AND a.status NOT IN {TERMINAL})
    ORDER BY e.id
    LIMIT %(limit)s
)
DELETE FROM runnerq_events WHERE id IN (SELECT id FROM doomed)
"""


# -- the tasks backend ----------------------------------------------------------------------------

# A task whose run_after had passed by its enqueue (the submit wrote it pending, due at its
# created_at): due at run_after instead, since the claim orders by COALESCE(scheduled_at,
# created_at). A scheduled row whose time has come is what every SDK claims at once.
TASK_DUE_AT = """
UPDATE runnerq_activities SET status = 'scheduled', scheduled_at = %(due)s
WHERE id = %(id)s AND status = 'pending'
RETURNING created_at
"""


# -- test support (runnerq_django.testing) ---------------------------------------------------------

# A claim filter: the activities of one tree (a root's own row has no root_activity_id).
IN_TREE = "AND COALESCE(a.root_activity_id, a.id) = %(root)s"

# Runnable activities due later (a delay, a retry backoff, a durable wait with a timer), for
# the test toolkit to choose which to fast-forward.
DUE_LATER = f"""
SELECT a.id, a.status, a.scheduled_at, a.waiting_result_id IS NOT NULL
FROM runnerq_activities a
WHERE a.queue_name = %(queue)s AND a.status IN {RUNNABLE} AND a.scheduled_at > now()
  AND (%(types)s::text[] IS NULL OR a.activity_type = ANY(%(types)s::text[]))
  AND (%(root)s::uuid IS NULL OR COALESCE(a.root_activity_id, a.id) = %(root)s::uuid)
ORDER BY a.scheduled_at
"""

# Due now: what a worker would claim once their time came. No event, as none marks that moment.
MAKE_DUE = f"""
UPDATE runnerq_activities a SET scheduled_at = now()
WHERE a.queue_name = %(queue)s AND a.id = ANY(%(ids)s::uuid[]) AND a.status IN {RUNNABLE} AND a.scheduled_at > now()
RETURNING a.id
"""
