"""The idempotency keys (``runnerq_idempotency``): take a key, find and lock its holder, point it
at another activity, and the holder's status for unique-while-active (``storage.unique``).
"""

from __future__ import annotations

# Idempotency keys: take the key, or find who holds it. A concurrent holder makes this wait for
# its commit (unique index), so two submits of one key never both create.
TAKE_KEY = """
INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id)
VALUES (%(queue)s, %(key)s, %(id)s)
ON CONFLICT (queue_name, idempotency_key) DO NOTHING
RETURNING activity_id
"""

# The activity holding an idempotency key, locked, with its status and parent.
KEY_HOLDER = """
SELECT k.activity_id, a.status, a.parent_activity_id
FROM runnerq_idempotency k
LEFT JOIN runnerq_activities a ON a.id = k.activity_id
WHERE k.queue_name = %(queue)s AND k.idempotency_key = %(key)s
FOR UPDATE OF k
"""

# Point an idempotency key at another activity (its holder is gone or finished).
REPOINT_KEY = """
UPDATE runnerq_idempotency SET activity_id = %(id)s, updated_at = now()
WHERE queue_name = %(queue)s AND idempotency_key = %(key)s
"""

# The activity holding an idempotency key (unlocked).
LOOKUP_KEY = """
SELECT activity_id FROM runnerq_idempotency WHERE queue_name = %(queue)s AND idempotency_key = %(key)s
"""

# Unique while active: the status of the activity holding a key, read in a statement of its own
# after KEY_HOLDER locked the key row, so that its snapshot sees a holder that a concurrent
# transaction created and committed while this one waited for the lock. NULL when it is gone.
HOLDER_STATUS = """
SELECT status FROM runnerq_activities WHERE id = %(holder)s AND queue_name = %(queue)s
"""
