"""The statements that create activities (``storage.submit``): a batch, a root, enqueue_many's
uniform batch, the spawning parent's fence, their spec events, and the tasks backend's due time.
"""

from __future__ import annotations

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

# One spec event of an activity.
INSERT_EVENT = """
INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
VALUES (%(id)s, %(queue)s, %(event_type)s, %(worker_id)s, %(detail)s::jsonb)
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

# enqueue_many's batch by COPY (``submit.submit_uniform``: root activities without keys, due at
# once, ``COPY_MIN_ROWS`` or more): the rows SUBMIT_UNIFORM inserts, in the same order, the other
# columns at their defaults (created_at now(), retry_count 0 ...). COPY inserts a page of rows per
# WAL record and skips the planner and the unnest; a row per line of text, the payload the checked
# JSON text. Then COPY_UNIFORM_INPUTS, then NOTIFY_WORK, all in one transaction.
COPY_UNIFORM_ACTIVITIES = """COPY runnerq_activities (
    id, queue_name, activity_type, priority, status, max_retries, timeout_seconds,
    retry_delay_seconds, max_retry_delay_seconds, metadata, root_activity_id, depth) FROM STDIN"""

# The inputs of COPY_UNIFORM_ACTIVITIES's rows.
COPY_UNIFORM_INPUTS = "COPY runnerq_inputs (activity_id, queue_name, payload, serialization) FROM STDIN"

# Announce the runnable work COPY_UNIFORM_ACTIVITIES created, once (delivered at commit).
NOTIFY_WORK = "SELECT pg_notify(%(work_channel)s, '')"
