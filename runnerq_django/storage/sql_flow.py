"""The statements of flow control (issue 13) on the app's own tables: paused queues and types
(``runnerq_flow_pauses``) and the ledger of changes (``runnerq_flow_ledger``). The claim's own
pause filter is in ``sql.py`` beside the claim it belongs to."""

from __future__ import annotations

from runnerq_django.storage import sql

# Pause a queue (activity_type '') or a type in it, or update who/why of an existing pause; the
# change goes to the ledger in the same statement. Returns whether the pause is new.
PAUSE = """
WITH paused AS (
    INSERT INTO runnerq_flow_pauses (queue_name, activity_type, paused_by, reason)
    VALUES (%(queue)s, %(type)s, %(actor)s, %(reason)s)
    ON CONFLICT (queue_name, activity_type) DO UPDATE
        SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason
    RETURNING (xmax = 0) AS created
),
logged AS (
    INSERT INTO runnerq_flow_ledger (action, queue_name, activity_type, actor, reason, detail)
    SELECT 'pause', %(queue)s, %(type)s, %(actor)s, %(reason)s, jsonb_build_object('created', created)
    FROM paused
)
SELECT created FROM paused
"""

# Resume a paused queue or type: delete its pause, record it in the ledger, and wake the queue's
# workers (its work channel) so that they claim at once instead of at their next poll. Returns
# whether something was paused.
RESUME = """
WITH resumed AS (
    DELETE FROM runnerq_flow_pauses
    WHERE queue_name = %(queue)s AND activity_type = %(type)s
    RETURNING paused_by, paused_at
),
logged AS (
    INSERT INTO runnerq_flow_ledger (action, queue_name, activity_type, actor, reason, detail)
    SELECT 'resume', %(queue)s, %(type)s, %(actor)s, %(reason)s,
           jsonb_build_object('paused_by', paused_by, 'paused_at', paused_at)
    FROM resumed
)
SELECT EXISTS (SELECT 1 FROM resumed), (SELECT pg_notify(%(work_channel)s, '') FROM resumed)
"""

# Every pause, queue and type order.
LIST_PAUSES = """
SELECT queue_name, activity_type, paused_by, reason, paused_at FROM runnerq_flow_pauses
ORDER BY queue_name, activity_type
"""

# The latest flow-control changes, newest first.
LIST_LEDGER = """
SELECT id, action, queue_name, activity_type, actor, reason, detail::text, at FROM runnerq_flow_ledger
ORDER BY at DESC, id DESC
LIMIT %(limit)s
"""

# Unique while active: the status of the activity holding a key, read in a statement of its own
# after KEY_HOLDER locked the key row, so that its snapshot sees a holder that a concurrent
# transaction created and committed while this one waited for the lock. NULL when it is gone.
HOLDER_STATUS = """
SELECT status FROM runnerq_activities WHERE id = %(holder)s AND queue_name = %(queue)s
"""


def claim_limited(token: str) -> str:
    """The claim of one concurrency-limited type (``%(type)s``, at most ``%(max_running)s``
    running per partition across the fleet), slots taken in the claim's own statement:

    1. ``stale``: the type's slots whose activity is no longer running under the slot's token
       (completed, failed, released, cancelled, reaped) are deleted: a slot is given back the
       moment its activity leaves ``processing``, and taken back here, by the next claim.
    2. ``held``: the slots still in use. A holder that finished after this statement's snapshot
       still counts (a slot given back late, never one handed out twice).
    3. ``cand``: up to ``%(candidates)s`` due activities of the type in claim order, locked as the
       walk goes (``FOR UPDATE SKIP LOCKED``), each with its partition key
       (``runnerq_flow_partitions``, written at enqueue; none: the partition ``''``).
    4. ``assigned``: the n-th candidate of a partition gets the n-th free slot number of that
       partition (numbers 0 .. max_running - 1), at most ``%(limit)s`` in claim order.
    5. ``taken``: the slots are inserted; the primary key (queue, type, partition, slot) makes a
       concurrent claimer that picked the same free slot wait for this one's commit and then
       take nothing (ON CONFLICT DO NOTHING), so the limit holds whatever the race. Only the
       candidates whose slot went in are claimed; the others stay as they are, no attempt
       counted, for the next claim.
    """
    return sql._claim_update(
        f"""stale AS (
    DELETE FROM runnerq_flow_slots s
    WHERE s.queue_name = %(queue)s AND s.activity_type = %(type)s
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities x
                      WHERE x.id = s.activity_id AND x.status = 'processing'
                        AND x.current_worker_id = s.token)
    RETURNING s.partition_key, s.slot
),
held AS (
    SELECT s.partition_key, s.slot FROM runnerq_flow_slots s
    WHERE s.queue_name = %(queue)s AND s.activity_type = %(type)s
      AND NOT EXISTS (SELECT 1 FROM stale d WHERE d.partition_key = s.partition_key AND d.slot = s.slot)
),
{_slotted_candidates("max_running", "held", token)},
taken AS (
    INSERT INTO runnerq_flow_slots (queue_name, activity_type, partition_key, slot, activity_id, token)
    SELECT %(queue)s, %(type)s, partition_key, slot, id, token FROM assigned
    ON CONFLICT DO NOTHING
    RETURNING activity_id, token
),
picked AS (
    SELECT t.activity_id AS id, s.claim_order, t.token
    FROM taken t JOIN assigned s ON s.id = t.activity_id
)""",
        "picked.token",
    )


# The partition keys of concurrency-limited activities, written at enqueue beside them.
INSERT_PARTITIONS = """
INSERT INTO runnerq_flow_partitions (activity_id, queue_name, activity_type, partition_key)
SELECT x.id, %(queue)s, %(type)s, x.partition_key
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x(id uuid, partition_key text)
ON CONFLICT (activity_id) DO NOTHING
"""

# Wake the workers of a queue (its work channel): a concurrency slot was given back.
NOTIFY_WORK = "SELECT pg_notify(%(work_channel)s, '')"

# Slots in use per concurrency-limited type and partition (the admin and runnerq_status).
SLOTS_IN_USE = """
SELECT s.queue_name, s.activity_type, count(*) FILTER (WHERE x.id IS NOT NULL), count(DISTINCT s.partition_key)
FROM runnerq_flow_slots s
LEFT JOIN runnerq_activities x
       ON x.id = s.activity_id AND x.status = 'processing' AND x.current_worker_id = s.token
GROUP BY s.queue_name, s.activity_type
ORDER BY s.queue_name, s.activity_type
"""


def claim_rated(token: str) -> str:
    """The claim of one rate-limited type (``%(type)s``): at most ``%(max_starts)s`` starts per
    window of ``%(period)s`` seconds per partition, fleet-wide. Windows are fixed, numbered
    ``floor(epoch / period)`` on the database clock: the claim's ``now()``, the instant it stores as
    ``started_at``, so every start counts in the window its ``started_at`` falls in (a claim that
    waits on a concurrent one keeps the window it began in).
    Like ``claim_limited``, with start slots instead of running slots: a window's slots are rows of
    ``runnerq_flow_rate_slots`` (queue, type, partition, window, slot number 0 .. max_starts - 1);
    a start takes one (ON CONFLICT DO NOTHING against a concurrent claimer), slots of past windows
    are deleted, and the candidates left without a slot stay as they are for a later window."""
    return sql._claim_update(
        f"""now_window AS (
    SELECT floor(extract(epoch FROM now()) / %(period)s)::bigint AS w
),
stale AS (
    DELETE FROM runnerq_flow_rate_slots s
    WHERE s.queue_name = %(queue)s AND s.activity_type = %(type)s AND s.window_id < (SELECT w FROM now_window)
    RETURNING 1
),
used AS (
    SELECT s.partition_key, s.slot FROM runnerq_flow_rate_slots s
    WHERE s.queue_name = %(queue)s AND s.activity_type = %(type)s
      AND s.window_id = (SELECT w FROM now_window)
      AND (SELECT count(*) FROM stale) >= 0
),
{_slotted_candidates("max_starts", "used", token)},
taken AS (
    INSERT INTO runnerq_flow_rate_slots (queue_name, activity_type, partition_key, window_id, slot, activity_id)
    SELECT %(queue)s, %(type)s, partition_key, (SELECT w FROM now_window), slot, id FROM assigned
    ON CONFLICT DO NOTHING
    RETURNING activity_id
),
picked AS (
    SELECT t.activity_id AS id, s.claim_order, s.token
    FROM taken t JOIN assigned s ON s.id = t.activity_id
)""",
        "picked.token",
    )


def _slotted_candidates(slots: str, occupied: str, token: str) -> str:
    """The part the two slotted claims share, CTEs ``cand`` .. ``assigned``: up to
    ``%(candidates)s`` due activities of the type in claim order, locked as the walk goes, each
    with its partition key; the n-th candidate of a partition gets the n-th slot number in
    0 .. ``%(<slots>)s`` - 1 that the CTE ``occupied`` (partition_key, slot) does not hold; the
    first ``%(limit)s`` by claim order keep theirs. The claim around it inserts the slots."""
    return f"""cand AS (
    SELECT w.id, COALESCE(p.partition_key, '') AS partition_key, w.claim_order FROM (
        SELECT due.id, row_number() OVER () AS claim_order FROM (
            SELECT a.id FROM runnerq_activities a
            WHERE a.queue_name = %(queue)s AND a.activity_type = %(type)s
              AND {sql.CLAIMABLE} AND {sql.type_not_paused("%(type)s")}
            ORDER BY {sql.CLAIM_ORDER}
            LIMIT %(candidates)s
            FOR UPDATE OF a SKIP LOCKED
        ) due
    ) w
    LEFT JOIN runnerq_flow_partitions p ON p.activity_id = w.id
),
numbered AS (
    SELECT c.id, c.partition_key, c.claim_order,
           row_number() OVER (PARTITION BY c.partition_key ORDER BY c.claim_order) AS nth
    FROM cand c
),
free AS (
    SELECT k.partition_key, g.slot, row_number() OVER (PARTITION BY k.partition_key ORDER BY g.slot) AS nth
    FROM (SELECT DISTINCT partition_key FROM cand) k
    CROSS JOIN generate_series(0, %({slots})s - 1) AS g(slot)
    WHERE NOT EXISTS (SELECT 1 FROM {occupied} o WHERE o.partition_key = k.partition_key AND o.slot = g.slot)
),
assigned AS (
    SELECT n.id, n.claim_order, f.partition_key, f.slot, {token} AS token
    FROM numbered n JOIN free f ON f.partition_key = n.partition_key AND f.nth = n.nth
    ORDER BY n.claim_order
    LIMIT %(limit)s
)"""
