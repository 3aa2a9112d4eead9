"""Flow limits (``storage.limits``): the claims of concurrency-limited and rate-limited
types through their slots (``runnerq_flow_slots``), the partition keys written at enqueue, the
slots in use, and retention's sweep of both tables.
"""

from __future__ import annotations

import functools

from runnerq_django.storage.sql.claims import CLAIM_ORDER, CLAIMABLE, DUE, _claim_update, type_not_paused

# A slot of the limited type's row in runnerq_flow_slots, by its key (alias ``sl``).
_SLOT_OF_TYPE = "sl.queue_name = %(queue)s AND sl.activity_type = %(type)s"

# The slot row ``sl`` is in use: its activity runs under the slot's token. Once its activity left
# ``processing`` under that token it is free: the next claim that needs it takes it over in place,
# and retention's sweep (``SWEEP_SLOTS``) deletes it once it has been free a while.
_SLOT_BUSY = """COALESCE((SELECT x.status = 'processing' AND x.current_worker_id = sl.token
                     FROM runnerq_activities x WHERE x.id = sl.activity_id), false)"""

# (A scalar sub-select on the id alone: as EXISTS with the status in its WHERE, Postgres probed
# the queue's partial index of processing rows, reading every running row once per slot.)


@functools.cache  # built once per token shape: a claim reuses its text
def claim_limited(token: str) -> str:
    """The claim of one concurrency-limited type (``%(type)s``, at most ``%(max_running)s``
    running per partition across the fleet), its slots taken in the claim's own statement.

    A slot is a row of ``runnerq_flow_slots`` (queue, type, partition, slot number 0 ..
    max_running - 1) naming the activity that holds it and that activity's claim token. It is in
    use while the activity is ``processing`` under that token (``_SLOT_BUSY``), so every way out
    of ``processing`` gives it back (complete, fail, release, cancel, a reap after ``kill -9``, a
    Go or TypeScript reaper) with no statement of those paths changed. Slot rows are kept and
    taken over in place (a HOT update: no index column changes; the table's fillfactor leaves the
    room); retention's sweep deletes the rows left free (``SWEEP_SLOTS``), so a partition has at
    most as many rows as it had running at once since.

    1. ``cand``: up to ``%(candidates)s`` due activities of the type in claim order, not locked,
       each with its partition key (``runnerq_flow_partitions`` by primary key; none: ``''``).
    2. ``room``: per partition of the candidates, how many of them may start: all when its slot
       rows and its candidates together stay within the limit (no slot probed), else the limit
       less its busy slots (the rows probed).
    3. ``locked``: the candidates within their partition's room, in claim order, each locked by
       primary key (``FOR UPDATE SKIP LOCKED``, due rechecked on the row as locked), at most
       ``%(limit)s``.
    4. ``reusable``: per partition, its lowest-numbered free slot rows (at most as many as it
       locked activities), each locked ``SKIP LOCKED`` and kept only if the row as locked (its
       latest version) still has the token this statement's snapshot saw free: a slot taken by a
       concurrent claim since then has another token and is passed over.
    5. ``virgin``: for the rest, the lowest slot numbers that have no row in the snapshot.
    6. ``paired``: the n-th locked activity of a partition gets its n-th slot; ``inserted``
       creates the virgin slots (ON CONFLICT DO NOTHING: a concurrent claim that created the same
       one first wins, and this one takes nothing), in (partition, slot) order; ``retaken`` then
       takes the reusable rows over. Only the activities whose slot went in are claimed; the
       others (locked, not updated) stay as they are, no attempt counted, for the next claim.

    Lock order, so that concurrent claims never deadlock: the locks of steps 3 and 4 never wait
    (SKIP LOCKED); the only waits are those of ``inserted`` on a concurrent claim's slot row of
    the same key, and its rows go in in key order, before ``retaken`` (which updates rows this
    statement already holds) writes anything: no cycle of waits can form.
    """
    return _claim_update(
        f"""cand AS (
    SELECT due.id, due.claim_order,
           COALESCE((SELECT p.partition_key FROM runnerq_flow_partitions p WHERE p.activity_id = due.id), '')
               AS partition_key
    FROM (
        SELECT w.id, row_number() OVER () AS claim_order FROM (
            SELECT a.id FROM runnerq_activities a
            WHERE a.queue_name = %(queue)s AND a.activity_type = %(type)s
              AND {CLAIMABLE} AND {type_not_paused("%(type)s")}
            ORDER BY {CLAIM_ORDER}
            LIMIT %(candidates)s
        ) w
    ) due
),
parts AS MATERIALIZED (
    SELECT k.partition_key, k.wanted,
           (SELECT count(*) FROM runnerq_flow_slots sl
            WHERE {_SLOT_OF_TYPE} AND sl.partition_key = k.partition_key) AS existing
    FROM (SELECT partition_key, count(*) AS wanted FROM cand GROUP BY partition_key) k
),
room AS (
    SELECT r.partition_key, r.existing,
           CASE WHEN r.existing + r.wanted <= %(max_running)s THEN r.wanted
                ELSE least(r.wanted, %(max_running)s - (
                    SELECT count(*) FROM runnerq_flow_slots sl
                    WHERE {_SLOT_OF_TYPE} AND sl.partition_key = r.partition_key AND {_SLOT_BUSY}))
           END AS room
    FROM parts r
),
locked AS (
    SELECT e.id, e.claim_order, e.partition_key FROM (
        SELECT n.id, n.claim_order, n.partition_key FROM (
            SELECT c.id, c.claim_order, c.partition_key,
                   row_number() OVER (PARTITION BY c.partition_key ORDER BY c.claim_order) AS nth
            FROM cand c
        ) n
        JOIN room r ON r.partition_key = n.partition_key AND n.nth <= r.room
        ORDER BY n.claim_order
    ) e
    CROSS JOIN LATERAL (
        SELECT r.id, r.status, r.scheduled_at FROM runnerq_activities r
        WHERE r.id = e.id
        FOR UPDATE OF r SKIP LOCKED
        OFFSET 0
    ) a
    WHERE {DUE}
    LIMIT %(limit)s
),
needs AS (
    SELECT l.partition_key, count(*) AS n, min(r.existing) AS existing
    FROM locked l JOIN room r ON r.partition_key = l.partition_key
    GROUP BY l.partition_key
),
reusable AS (
    SELECT f.row_id, f.partition_key, f.slot,
           row_number() OVER (PARTITION BY f.partition_key ORDER BY f.slot) AS nth
    FROM needs d
    CROSS JOIN LATERAL (
        SELECT sl.partition_key, sl.slot, sl.token FROM runnerq_flow_slots sl
        WHERE {_SLOT_OF_TYPE} AND sl.partition_key = d.partition_key AND sl.slot < %(max_running)s
          AND NOT {_SLOT_BUSY}
        ORDER BY sl.slot
        LIMIT d.n
    ) seen
    CROSS JOIN LATERAL (
        SELECT sl.ctid AS row_id, sl.partition_key, sl.slot, sl.token FROM runnerq_flow_slots sl
        WHERE {_SLOT_OF_TYPE} AND sl.partition_key = seen.partition_key AND sl.slot = seen.slot
        FOR UPDATE OF sl SKIP LOCKED
        OFFSET 0
    ) f
    WHERE f.token = seen.token
),
virgin AS (
    SELECT d.partition_key, v.slot,
           (SELECT count(*) FROM reusable u WHERE u.partition_key = d.partition_key)
               + row_number() OVER (PARTITION BY d.partition_key ORDER BY v.slot) AS nth
    FROM needs d
    CROSS JOIN LATERAL (
        SELECT g.slot FROM generate_series(0, least(%(max_running)s, d.existing + d.n) - 1) AS g(slot)
        WHERE NOT EXISTS (SELECT 1 FROM runnerq_flow_slots sl
                          WHERE {_SLOT_OF_TYPE} AND sl.partition_key = d.partition_key AND sl.slot = g.slot)
        ORDER BY g.slot
        LIMIT d.n
    ) v
),
paired AS (
    SELECT n.id, n.claim_order, s.row_id, s.partition_key, s.slot, s.reused, {token} AS token
    FROM (
        SELECT l.id, l.claim_order, l.partition_key,
               row_number() OVER (PARTITION BY l.partition_key ORDER BY l.claim_order) AS nth
        FROM locked l
    ) n
    JOIN (
        SELECT row_id, partition_key, slot, nth, true AS reused FROM reusable
        UNION ALL
        SELECT NULL::tid, partition_key, slot, nth, false FROM virgin
    ) s ON s.partition_key = n.partition_key AND s.nth = n.nth
),
inserted AS (
    INSERT INTO runnerq_flow_slots (queue_name, activity_type, partition_key, slot, activity_id, token)
    SELECT %(queue)s, %(type)s, p.partition_key, p.slot, p.id, p.token FROM paired p
    WHERE NOT p.reused
    ORDER BY p.partition_key, p.slot
    ON CONFLICT DO NOTHING
    RETURNING activity_id
),
retaken AS (
    UPDATE runnerq_flow_slots sl SET activity_id = p.id, token = p.token, taken_at = now()
    FROM paired p
    WHERE sl.ctid = p.row_id AND p.reused
      AND (SELECT count(*) FROM inserted) >= 0  -- after every insert (the lock order above)
    RETURNING sl.activity_id
),
picked AS (
    SELECT p.id, p.claim_order, p.token FROM paired p
    WHERE p.id IN (SELECT activity_id FROM inserted UNION ALL SELECT activity_id FROM retaken)
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


@functools.cache  # built once per token shape: a claim reuses its text
def claim_rated(token: str) -> str:
    """The claim of one rate-limited type (``%(type)s``): at most ``%(max_starts)s`` starts per
    window of ``%(period)s`` seconds per partition, fleet-wide. Windows are fixed, numbered
    ``floor(epoch / period)`` on the database clock: the claim's ``now()``, the instant it stores as
    ``started_at``, so every start counts in the window its ``started_at`` falls in (a claim that
    waits on a concurrent one keeps the window it began in).
    Like ``claim_limited``, with start slots instead of running slots: a window's slots are rows of
    ``runnerq_flow_rate_slots`` (queue, type, partition, window, slot number 0 .. max_starts - 1);
    a start takes one (ON CONFLICT DO NOTHING against a concurrent claimer), slots of past windows
    are deleted, and the candidates left without a slot stay as they are for a later window.
    Lock order: the past windows' rows are deleted SKIP LOCKED (never waiting; they hold no key
    of the current window) and the new slots go in in (partition, slot) order, the only waits."""
    return _claim_update(
        f"""now_window AS (
    SELECT floor(extract(epoch FROM now()) / %(period)s)::bigint AS w
),
stale AS (
    DELETE FROM runnerq_flow_rate_slots s
    WHERE (s.queue_name, s.activity_type, s.partition_key, s.window_id, s.slot) IN (
        SELECT o.queue_name, o.activity_type, o.partition_key, o.window_id, o.slot FROM runnerq_flow_rate_slots o
        WHERE o.queue_name = %(queue)s AND o.activity_type = %(type)s AND o.window_id < (SELECT w FROM now_window)
        FOR UPDATE OF o SKIP LOCKED  -- a past window's row another claim is deleting: left to it
    )
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
    ORDER BY partition_key, slot  -- key order: concurrent claims' waits on each other's rows can't form a cycle
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
              AND {CLAIMABLE} AND {type_not_paused("%(type)s")}
            ORDER BY {CLAIM_ORDER}
            LIMIT %(candidates)s
            FOR UPDATE OF a SKIP LOCKED
        ) due
    ) w
    LEFT JOIN LATERAL (  -- by primary key (a hash join read the whole table)
        SELECT p.partition_key FROM runnerq_flow_partitions p WHERE p.activity_id = w.id OFFSET 0
    ) p ON true
),
numbered AS (
    SELECT c.id, c.partition_key, c.claim_order,
           row_number() OVER (PARTITION BY c.partition_key ORDER BY c.claim_order) AS nth
    FROM cand c
),
free AS (
    SELECT k.partition_key, g.slot, row_number() OVER (PARTITION BY k.partition_key ORDER BY g.slot) AS nth
    FROM (SELECT partition_key, count(*) AS wanted FROM cand GROUP BY partition_key) k
    -- the first `wanted` free numbers lie below `occupied` + `wanted`: no more are generated
    CROSS JOIN LATERAL generate_series(
        0, least(%({slots})s, k.wanted + (SELECT count(*) FROM {occupied} o WHERE o.partition_key = k.partition_key)) - 1
    ) AS g(slot)
    WHERE NOT EXISTS (SELECT 1 FROM {occupied} o WHERE o.partition_key = k.partition_key AND o.slot = g.slot)
),
assigned AS (
    SELECT n.id, n.claim_order, f.partition_key, f.slot, {token} AS token
    FROM numbered n JOIN free f ON f.partition_key = n.partition_key AND f.nth = n.nth
    ORDER BY n.claim_order
    LIMIT %(limit)s
)"""


# -- the sweep of flow-control state (retention's, one worker per queue) ----------------------------
# Both statements walk their table in primary-key order, a page of at most %(page)s rows after the
# cursor per statement (the caller keeps the cursor), so one statement examines a bounded number
# of rows and holds a bounded number of locks, however large the table. Every lock is taken
# SKIP LOCKED (never waiting: a row a claim or an enqueue holds is left to a later pass), and what
# makes a row deletable is re-checked on the row as locked, in the same statement.

# Free concurrency slots: a slot row whose activity no longer runs under the slot's token (the
# claim's own rule, ``_SLOT_BUSY``, read in the statement's snapshot), last taken at least
# %(idle_s)s seconds ago (a busy partition's free slots stay, to be taken over in place). Once
# locked, the row is deleted only if it still has the token seen free: a claim that took the slot
# over since the snapshot wrote its own token (a new one per claim), and a free token never runs
# again, so no slot in use is ever deleted. A claim that saw the row before it went finds it gone
# when it locks it and takes nothing (it stays under its limit); a later claim creates the slot
# number afresh, its primary key guarding the race as for any new slot. Returns the rows deleted
# and the key of the page's last row (NULLs when the page was empty: the walk starts over).
SWEEP_SLOTS = f"""
WITH page AS (
    SELECT sl.activity_type, sl.partition_key, sl.slot, sl.token, sl.activity_id, sl.taken_at
    FROM runnerq_flow_slots sl
    WHERE sl.queue_name = %(queue)s
      AND (sl.activity_type, sl.partition_key, sl.slot) > (%(after_type)s, %(after_partition)s, %(after_slot)s)
    ORDER BY sl.activity_type, sl.partition_key, sl.slot
    LIMIT %(page)s
),
seen AS (
    SELECT sl.activity_type, sl.partition_key, sl.slot, sl.token FROM page sl
    WHERE sl.taken_at <= now() - make_interval(secs => %(idle_s)s) AND NOT {_SLOT_BUSY}
),
locked AS (
    SELECT f.row_id FROM seen
    CROSS JOIN LATERAL (
        SELECT sl.ctid AS row_id, sl.token FROM runnerq_flow_slots sl
        WHERE sl.queue_name = %(queue)s AND sl.activity_type = seen.activity_type
          AND sl.partition_key = seen.partition_key AND sl.slot = seen.slot
        FOR UPDATE OF sl SKIP LOCKED
        OFFSET 0
    ) f
    WHERE f.token = seen.token
),
deleted AS (
    DELETE FROM runnerq_flow_slots sl USING locked l WHERE sl.ctid = l.row_id
    RETURNING 1
),
last AS (
    SELECT activity_type, partition_key, slot FROM page
    ORDER BY activity_type DESC, partition_key DESC, slot DESC LIMIT 1
)
SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM page),
       (SELECT activity_type FROM last), (SELECT partition_key FROM last), (SELECT slot FROM last)
"""

# Partition keys no claim can need again: the row of an activity that is gone (its tree deleted
# by retention or an operator) or ``completed`` (final: no command runs a completed activity
# again). Failed, dead-lettered and cancelled activities keep theirs (``retry`` and ``redrive``
# run them again, in their partition) until retention deletes their tree. Both states are final,
# so what the snapshot saw holds on the row as locked; the lock (SKIP LOCKED) keeps the pass from
# waiting on anything. The page walks every queue's rows by activity id and deletes this queue's.
# Returns the rows deleted, the rows examined and the page's last id (NULL: start over).
SWEEP_PARTITIONS = """
WITH page AS (
    SELECT p.activity_id, p.queue_name FROM runnerq_flow_partitions p
    WHERE p.activity_id > %(after)s::uuid
    ORDER BY p.activity_id
    LIMIT %(page)s
),
done AS (
    SELECT g.activity_id FROM page g
    WHERE g.queue_name = %(queue)s
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities a WHERE a.id = g.activity_id AND a.status <> 'completed')
),
locked AS (
    SELECT f.row_id FROM done
    CROSS JOIN LATERAL (
        SELECT p.ctid AS row_id FROM runnerq_flow_partitions p
        WHERE p.activity_id = done.activity_id
        FOR UPDATE OF p SKIP LOCKED
        OFFSET 0
    ) f
),
deleted AS (
    DELETE FROM runnerq_flow_partitions p USING locked l WHERE p.ctid = l.row_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM page),
       (SELECT activity_id FROM page ORDER BY activity_id DESC LIMIT 1)
"""
