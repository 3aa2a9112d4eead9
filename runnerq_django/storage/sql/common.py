"""The fragments several subjects share: the statuses as SQL literals, the input a claim reads,
the database clock, the next attempt count, the results row, and the waking of waiters with its
notifications.
"""

from __future__ import annotations

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


# retry_count plus one attempt, stopping at the int4 maximum: another writer may have stored
# that maximum (with unlimited attempts), and one more was "integer out of range", which left the
# failure unrecorded and made every reap of the queue fail, its other expired leases included.
NEXT_RETRY_COUNT = "LEAST(retry_count, 2147483646) + 1"


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
