"""Forks (``storage.fork``): a new run of a finished (or cancelled) root that keeps the
checkpoints recorded before a chosen step, so its replay skips them and runs that step and
everything after it again. The link between a fork and its origin, who made it and why, is the
app's own table ``runnerq_forks``; the copied checkpoints are ordinary checkpoints of the fork
(``runnerq_results`` rows it owns, under ids computed from its own id), which any SDK reads as
its own.
"""

from __future__ import annotations

from runnerq_django.storage.sql.common import RESULT_COLUMNS

# The root %(id)s of queue %(queue)s that a fork starts from: its type, status, parent, the
# activity options a new run takes again, and its input (as text, with its serialization).
ORIGIN = """
SELECT a.activity_type, a.status, a.parent_activity_id, a.priority, a.max_retries, a.timeout_seconds,
       a.retry_delay_seconds, a.max_retry_delay_seconds, a.metadata::text, i.payload::text, i.serialization
  FROM runnerq_activities a
  LEFT JOIN runnerq_inputs i ON i.activity_id = a.id
 WHERE a.id = %(id)s AND a.queue_name = %(queue)s
"""

# The origin's checkpoints (steps, sleeps, signals, deadlines), oldest first: (result id, step,
# created_at).
CHECKPOINTS = """
SELECT activity_id, step, created_at FROM runnerq_results
 WHERE owner_activity_id = %(id)s AND queue_name = %(queue)s AND step IS NOT NULL
 ORDER BY created_at, activity_id
"""

# The origin's children (spawned by a step), oldest first: (id, idempotency key, created_at).
CHILDREN = """
SELECT id, idempotency_key, created_at FROM runnerq_activities
 WHERE parent_activity_id = %(id)s AND queue_name = %(queue)s
 ORDER BY created_at, id
"""

# Copy the origin's checkpoints %(old)s to the fork under the ids %(new)s (same order), owned
# by the fork %(fork)s, with their state, data, step and serialization.
COPY_CHECKPOINTS = f"""
INSERT INTO runnerq_results {RESULT_COLUMNS}
SELECT m.new_id, r.queue_name, r.state, r.data, %(fork)s, r.step, r.serialization
  FROM unnest(%(old)s::uuid[], %(new)s::uuid[]) AS m(old_id, new_id)
  JOIN runnerq_results r ON r.activity_id = m.old_id
ON CONFLICT (activity_id) DO NOTHING
"""

# A spawn checkpoint of the fork: step %(step)s found child %(child)s (its replay reuses it).
SPAWN_CHECKPOINT = f"""
INSERT INTO runnerq_results {RESULT_COLUMNS}
VALUES (%(id)s, %(queue)s, 'Ok', %(data)s::jsonb, %(fork)s, %(step)s, 'json-v1')
ON CONFLICT (activity_id) DO NOTHING
"""

# The ledger: fork %(fork)s of %(origin)s from step %(step)s, by %(actor)s, because %(reason)s.
RECORD_FORK = """
INSERT INTO runnerq_forks (fork_id, origin_id, queue_name, from_step, copied, reused_children, actor, reason, created_at)
VALUES (%(fork)s, %(origin)s, %(queue)s, %(step)s, %(copied)s, %(reused)s, %(actor)s, %(reason)s, now())
"""

# The forks of %(id)s and the origin it was forked from, for the detail page and the client:
# (fork id, origin id, from step, actor, reason, created_at), newest first.
FORKS_OF = """
SELECT fork_id, origin_id, from_step, actor, reason, created_at FROM runnerq_forks
 WHERE origin_id = %(id)s OR fork_id = %(id)s
 ORDER BY created_at DESC
 LIMIT 100
"""
