"""A claim's lease: renewal, the release at a graceful shutdown, and the reaper of expired leases
(``storage.attempts``).
"""

from __future__ import annotations

import functools

from runnerq_django.storage.sql.common import (
    NEXT_RETRY_COUNT,
    NOTIFY_RESULTS,
    NOW_MS,
    RESULT_COLUMNS,
    RESULT_UPSERT,
    wake_waiters,
)

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
