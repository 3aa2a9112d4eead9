"""The end of an attempt (``storage.attempts``): a batch of acks, the waking of their waiters, and a
failure (retry after a backoff, or a terminal result).
"""

from __future__ import annotations

from runnerq_django.storage.sql.common import (
    NEXT_RETRY_COUNT,
    NOTIFY_RESULTS,
    NOTIFY_WOKEN,
    RESULT_COLUMNS,
    RESULT_UPSERT,
    wake_waiters,
)

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
