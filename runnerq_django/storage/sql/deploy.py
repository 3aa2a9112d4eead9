"""The deploy check's reads (``storage.deploy``): which activity types the unfinished work of the
database names, which waiting parents await children of given types, and the canvases still
running. Read-only; bounded per type by the examples they return."""

from __future__ import annotations

# Unfinished work per queue, type and status (the dequeue and processing indexes' statuses), with
# up to %(examples)s example ids each, oldest first.
LIVE_TYPES = """
SELECT queue_name, activity_type, status, count(*),
       (array_agg(id ORDER BY created_at, id))[1:%(examples)s]
  FROM runnerq_activities
 WHERE status IN ('pending', 'scheduled', 'retrying', 'waiting', 'processing')
 GROUP BY queue_name, activity_type, status
 ORDER BY queue_name, activity_type, status
"""

# Waiting parents with an unfinished child of a type in %(types)s: per queue and child type,
# how many parents, and up to %(examples)s of their ids.
PARENTS_WAITING_ON = """
SELECT c.queue_name, c.activity_type, count(DISTINCT p.id),
       (array_agg(DISTINCT p.id))[1:%(examples)s]
  FROM runnerq_activities c
  JOIN runnerq_activities p ON p.id = c.parent_activity_id AND p.status = 'waiting'
 WHERE c.activity_type = ANY (%(types)s::text[])
   AND c.status IN ('pending', 'scheduled', 'retrying', 'waiting', 'processing')
 GROUP BY c.queue_name, c.activity_type
"""

# Unfinished canvas orchestrators (type %(canvas)s) and their input as text, at most %(limit)s.
LIVE_CANVASES = """
SELECT a.id, a.queue_name, i.payload::text
  FROM runnerq_activities a
  LEFT JOIN runnerq_inputs i ON i.activity_id = a.id
 WHERE a.activity_type = %(canvas)s
   AND a.status IN ('pending', 'scheduled', 'retrying', 'waiting', 'processing')
 ORDER BY a.created_at, a.id
 LIMIT %(limit)s
"""

# The versions recorded by runs still unfinished, per activity type and gate: the oldest
# (lowest) version a live run took, how many live runs took it, and up to %(examples)s of them.
LIVE_VERSIONS = """
SELECT a.activity_type, substr(r.step, 9) AS gate, min((r.data->>'version')::int), count(*),
       (array_agg(a.id ORDER BY (r.data->>'version')::int, a.id))[1:%(examples)s]
  FROM runnerq_results r
  JOIN runnerq_activities a ON a.id = r.owner_activity_id
 WHERE r.step LIKE 'version:%%' AND jsonb_typeof(r.data->'version') = 'number'
   AND a.status IN ('pending', 'scheduled', 'retrying', 'waiting', 'processing')
 GROUP BY a.activity_type, substr(r.step, 9)
"""
