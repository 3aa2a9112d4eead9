"""Durable execution (``storage.durable``): checkpoints, the dependencies a wait records, the
park in three statements, signals, and the reads of results and checkpoints.
"""

from __future__ import annotations

from runnerq_django.storage.sql.common import NOTIFY_WOKEN, RESULT_COLUMNS, RESULT_UPSERT, wake_waiters

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
