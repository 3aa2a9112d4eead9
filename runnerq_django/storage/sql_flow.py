"""The statements of flow control (issue 13) on the app's own tables: paused queues and types
(``runnerq_flow_pauses``) and the ledger of changes (``runnerq_flow_ledger``). The claim's own
pause filter is in ``sql.py`` beside the claim it belongs to."""

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
