"""Progress and published events (``storage.progress``): what a running handler reports through
``ctx.progress()`` and ``ctx.publish()``, and the reads of it.

Two tables of the app's own, never a column on a spec table (a Go or TypeScript worker neither
reads nor needs them): ``runnerq_progress``, one row per activity holding its latest progress and
the sequence number of its last published event, and ``runnerq_published_events``, its events
by (activity, sequence number). A write is fenced by the attempt's claim, as a checkpoint is: an
attempt whose claim was lost writes nothing.
"""

from __future__ import annotations

from runnerq_django.storage.sql.common import TERMINAL

# Write one attempt's buffered progress and events, fenced by its claim (%(id)s, %(token)s), in
# one statement: the progress row takes the new value (when %(has_progress)s) and counts
# %(n)s more events; the events (a JSON array of [name, data] pairs, oldest first) get the next
# sequence numbers, the ones the bound %(keep)s would trim at once are not inserted, and events
# %(keep)s or more behind the last go. Notifies %(channel)s with the activity id. Returns the
# last sequence number, or no row when the claim no longer owns the activity.
WRITE = """
WITH owner AS (
    SELECT a.id FROM runnerq_activities a
     WHERE a.id = %(id)s AND a.queue_name = %(queue)s AND a.status = 'processing'
       AND a.current_worker_id = %(token)s
),
progress AS (
    INSERT INTO runnerq_progress AS p (activity_id, queue_name, done, total, message, last_seq, updated_at)
    SELECT id, %(queue)s, %(done)s, %(total)s, %(message)s, %(n)s, now() FROM owner
    ON CONFLICT (activity_id) DO UPDATE
       SET done = CASE WHEN %(has_progress)s THEN excluded.done ELSE p.done END,
           total = CASE WHEN %(has_progress)s THEN excluded.total ELSE p.total END,
           message = CASE WHEN %(has_progress)s THEN excluded.message ELSE p.message END,
           last_seq = p.last_seq + %(n)s,
           updated_at = now()
    RETURNING last_seq
),
published AS (
    INSERT INTO runnerq_published_events (activity_id, seq, queue_name, name, data, attempt, created_at)
    SELECT %(id)s, progress.last_seq - %(n)s + e.ord, %(queue)s, e.item->>0, e.item->1, %(attempt)s, now()
      FROM progress, jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS e(item, ord)
     WHERE e.ord > %(n)s - %(keep)s
),
trimmed AS (
    DELETE FROM runnerq_published_events
     WHERE activity_id = %(id)s AND seq <= (SELECT last_seq FROM progress) - %(keep)s
)
SELECT last_seq, pg_notify(%(channel)s, %(id)s::text) FROM progress
"""

# The progress of activity %(id)s of queue %(queue)s: (done, total, message, updated_at, last
# event sequence number), or no row.
GET_PROGRESS = """
SELECT done, total, message, updated_at, last_seq FROM runnerq_progress
 WHERE activity_id = %(id)s AND queue_name = %(queue)s
"""

# Up to %(limit)s events of activity %(id)s after sequence number %(after)s, oldest first, with
# the activity's status read in the same snapshot (NULL once it is gone): a reader that sees it
# finished has every event it will ever have (its events commit before its outcome). At least
# one row: the status, with NULL event columns when there is no event.
READ_EVENTS = f"""
SELECT (SELECT a.status FROM runnerq_activities a WHERE a.id = %(id)s AND a.queue_name = %(queue)s)
           IN {TERMINAL} IS NOT FALSE AS ended,
       e.seq, e.name, e.data::text, e.attempt, e.created_at
  FROM (SELECT 1) one
  LEFT JOIN LATERAL (
        SELECT seq, name, data, attempt, created_at FROM runnerq_published_events
         WHERE activity_id = %(id)s AND seq > %(after)s
         ORDER BY seq
         LIMIT %(limit)s) e ON true
 ORDER BY e.seq
"""

# The newest event named %(name)s of activity %(id)s (its data as text), or no row.
LATEST_EVENT = """
SELECT seq, data::text FROM runnerq_published_events
 WHERE activity_id = %(id)s AND name = %(name)s
 ORDER BY seq DESC
 LIMIT 1
"""
