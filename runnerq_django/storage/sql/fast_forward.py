"""The test toolkit's statements (``runnerq_django.testing``, ``storage.fast_forward``): a tree's
claim filter, the activities due later, and making them due now.
"""

from __future__ import annotations

from runnerq_django.storage.sql.common import RUNNABLE

# A claim filter: the activities of one tree (a root's own row has no root_activity_id).
IN_TREE = "AND COALESCE(a.root_activity_id, a.id) = %(root)s"

# Runnable activities due later (a delay, a retry backoff, a durable wait with a timer), for
# the test toolkit to choose which to fast-forward.
DUE_LATER = f"""
SELECT a.id, a.status, a.scheduled_at, a.waiting_result_id IS NOT NULL
FROM runnerq_activities a
WHERE a.queue_name = %(queue)s AND a.status IN {RUNNABLE} AND a.scheduled_at > now()
  AND (%(types)s::text[] IS NULL OR a.activity_type = ANY(%(types)s::text[]))
  AND (%(root)s::uuid IS NULL OR COALESCE(a.root_activity_id, a.id) = %(root)s::uuid)
ORDER BY a.scheduled_at
"""

# Due now: what a worker would claim once their time came. No event, as none marks that moment.
MAKE_DUE = f"""
UPDATE runnerq_activities a SET scheduled_at = now()
WHERE a.queue_name = %(queue)s AND a.id = ANY(%(ids)s::uuid[]) AND a.status IN {RUNNABLE} AND a.scheduled_at > now()
RETURNING a.id
"""
