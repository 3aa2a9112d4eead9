"""The statements of the periodic scheduler's tables (lease, occurrence guard, repair counts), by
name; the operations in ``storage.periodic`` run them. Parameters are named (``%(name)s``)."""

from __future__ import annotations

# --- statements ------------------------------------------------------------------------------

# Acquire or renew the lease of a namespace, with release precedence. One statement: it creates
# the row, keeps it (the owner renewing), or takes it over when it expired or when the caller's
# release is higher. A new owner gets a new token from a sequence that never repeats.
ACQUIRE_LEASE = """
INSERT INTO runnerq_periodic_lease AS l (namespace, owner, release, token, acquired_at, renewed_at, expires_at)
VALUES (%(namespace)s, %(node)s, %(release)s, nextval('runnerq_periodic_lease_token_seq'), now(), now(),
        now() + make_interval(secs => %(seconds)s))
ON CONFLICT (namespace) DO UPDATE SET
    owner = EXCLUDED.owner,
    release = EXCLUDED.release,
    token = CASE WHEN l.owner = EXCLUDED.owner THEN l.token ELSE EXCLUDED.token END,
    acquired_at = CASE WHEN l.owner = EXCLUDED.owner THEN l.acquired_at ELSE now() END,
    renewed_at = now(),
    expires_at = EXCLUDED.expires_at
WHERE l.owner = EXCLUDED.owner OR l.expires_at < now() OR l.release < EXCLUDED.release
RETURNING token
"""

# An operator's forced takeover (e.g. a rollback to a lower release): always wins, new token.
FORCE_LEASE = """
INSERT INTO runnerq_periodic_lease AS l (namespace, owner, release, token, acquired_at, renewed_at, expires_at)
VALUES (%(namespace)s, %(node)s, %(release)s, nextval('runnerq_periodic_lease_token_seq'), now(), now(),
        now() + make_interval(secs => %(seconds)s))
ON CONFLICT (namespace) DO UPDATE SET
    owner = EXCLUDED.owner, release = EXCLUDED.release, token = EXCLUDED.token,
    acquired_at = now(), renewed_at = now(), expires_at = EXCLUDED.expires_at
RETURNING token
"""

# Give the lease up on a clean shutdown so another process takes over at once (token kept: the
# next owner bumps it).
RELEASE_LEASE = """
UPDATE runnerq_periodic_lease SET expires_at = now() - interval '1 microsecond'
WHERE namespace = %(namespace)s AND owner = %(node)s AND token = %(token)s
RETURNING 1
"""

# The namespace's lease as it stands, and whether it expired (the status view).
READ_LEASE = """
SELECT owner, release, token, acquired_at, renewed_at, expires_at, expires_at < now() AS expired
FROM runnerq_periodic_lease WHERE namespace = %(namespace)s
"""

# The fencing check, inside an enqueue's or a guard's transaction. FOR SHARE makes a takeover (an
# UPDATE of this row) wait until that transaction commits, so "check, then write" cannot
# interleave with it.
CHECK_FENCE = """
SELECT 1 FROM runnerq_periodic_lease
WHERE namespace = %(namespace)s AND owner = %(node)s AND token = %(token)s
FOR SHARE
"""

# The once-only guard of an occurrence. No row back means someone already has it.
CLAIM_OCCURRENCE = """
INSERT INTO runnerq_periodic_occurrences (idempotency_key, namespace, job_id, occurrence, node, token, enqueued_at)
VALUES (%(key)s, %(namespace)s, %(job_id)s, %(occurrence)s, %(node)s, %(token)s, now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key
"""

# Record the activity an occurrence's guard enqueued.
SET_OCCURRENCE_ACTIVITY = """
UPDATE runnerq_periodic_occurrences SET activity_id = %(activity_id)s WHERE idempotency_key = %(key)s
"""

# A Celery send holds this lock for as long as it talks to the broker: the unsent scan skips
# locked rows, so it never reports an occurrence that a live process is still sending.
LOCK_UNSENT_GUARD = """
SELECT 1 FROM runnerq_periodic_occurrences
WHERE idempotency_key = %(key)s AND sent_at IS NULL
FOR NO KEY UPDATE
"""

# A Celery occurrence's send is confirmed, with its task id.
MARK_SENT = """
UPDATE runnerq_periodic_occurrences SET sent_at = now(), task_id = %(task_id)s
WHERE idempotency_key = %(key)s AND sent_at IS NULL
RETURNING 1
"""

# Give back the guard of an occurrence whose send failed, so it can be sent again.
RELEASE_GUARD = """
DELETE FROM runnerq_periodic_occurrences WHERE idempotency_key = %(key)s AND sent_at IS NULL
RETURNING 1
"""

# Guarded Celery occurrences with no confirmed send, that no live send is working on (SKIP
# LOCKED passes over rows a sender holds), guarded long enough ago.
UNSENT_OCCURRENCES = """
SELECT idempotency_key, job_id, occurrence, node, token, enqueued_at FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND job_id = ANY(%(job_ids)s) AND occurrence >= %(since)s
  AND sent_at IS NULL AND task_id IS NULL AND activity_id IS NULL
  AND enqueued_at < now() - make_interval(secs => %(older_than)s)
ORDER BY occurrence
FOR SHARE SKIP LOCKED
"""

# Evidence: the last enqueued occurrence of each job (exact, unlike an evicted cache record).
LAST_OCCURRENCES = """
SELECT job_id, max(occurrence) FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND job_id = ANY(%(job_ids)s)
GROUP BY job_id
"""

# Whether the occurrences table exists yet (a system check may run before migrate).
OCCURRENCES_TABLE_EXISTS = "SELECT to_regclass('runnerq_periodic_occurrences') IS NOT NULL"

# Job ids with enqueued occurrences in the namespace since an instant (the orphaned-progress check).
RECENT_JOB_IDS = """
SELECT job_id, max(occurrence) FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND occurrence > %(since)s
GROUP BY job_id
ORDER BY job_id
"""

# Count one repair of a job for a reason, per UTC day.
COUNT_REPAIR = """
INSERT INTO runnerq_periodic_repairs (namespace, job_id, reason, day, count, last_at)
VALUES (%(namespace)s, %(job_id)s, %(reason)s, (now() AT TIME ZONE 'UTC')::date, 1, now())
ON CONFLICT (namespace, job_id, reason, day) DO UPDATE
SET count = runnerq_periodic_repairs.count + 1, last_at = now()
"""

# The repair counts of a namespace, per job and reason.
REPAIR_COUNTS = """
SELECT job_id, reason, sum(count)::bigint FROM runnerq_periodic_repairs
WHERE namespace = %(namespace)s GROUP BY job_id, reason
"""

# Keep the guard rows for longer than any occurrence may still be enqueued (grace + skew), and
# always the newest row of each job (the evidence).
PRUNE_OCCURRENCES = """
WITH doomed AS (
    SELECT x.ctid FROM runnerq_periodic_occurrences x
    WHERE x.namespace = %(namespace)s AND x.occurrence < %(before)s
      AND x.occurrence < (SELECT max(m.occurrence) FROM runnerq_periodic_occurrences m
                          WHERE m.namespace = x.namespace AND m.job_id = x.job_id)
    LIMIT %(batch)s
)
DELETE FROM runnerq_periodic_occurrences o USING doomed WHERE o.ctid = doomed.ctid
RETURNING 1
"""
