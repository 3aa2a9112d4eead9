"""Paused queues and types (``storage.flow``) on the app's own tables:
``runnerq_flow_pauses`` and the ledger of changes (``runnerq_flow_ledger``). The claim's own pause
filter is in ``claims`` beside the claim it belongs to.
"""

from __future__ import annotations

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

# The pauses in queue and type order (the primary key's), after (%(after_queue)s,
# %(after_type)s), at most %(limit)s of them (NULL: all).
LIST_PAUSES = """
SELECT queue_name, activity_type, paused_by, reason, paused_at FROM runnerq_flow_pauses
 WHERE (queue_name, activity_type) > (%(after_queue)s, %(after_type)s)
 ORDER BY queue_name, activity_type
 LIMIT %(limit)s
"""

# The first %(limit)s pauses of each queue of %(queues)s (one primary-key range each).
PAUSES_IN = """
SELECT p.queue_name, p.activity_type, p.paused_by, p.reason, p.paused_at
  FROM unnest(%(queues)s::text[]) AS q(name)
 CROSS JOIN LATERAL (SELECT * FROM runnerq_flow_pauses
                      WHERE queue_name = q.name ORDER BY activity_type LIMIT %(limit)s) p
 ORDER BY 1, 2
"""

# How many pauses each queue of %(queues)s has.
PAUSE_COUNTS = """
SELECT queue_name, count(*) FROM runnerq_flow_pauses WHERE queue_name = ANY(%(queues)s::text[])
 GROUP BY queue_name
"""

# How many pauses there are in all.
PAUSE_TOTAL = "SELECT count(*) FROM runnerq_flow_pauses"

# The latest flow-control changes, newest first.
LIST_LEDGER = """
SELECT id, action, queue_name, activity_type, actor, reason, detail::text, at FROM runnerq_flow_ledger
ORDER BY at DESC, id DESC
LIMIT %(limit)s
"""
