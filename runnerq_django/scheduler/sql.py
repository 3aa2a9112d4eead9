"""Every statement the scheduler runs on its own tables, named, in one place.

The activity itself is enqueued through the storage layer (``storage.submit``); these are the
lease, the occurrence guard, the evidence a repair rebuilds progress from, and the counters.
"""

# Acquire or renew the lease of a namespace, with release precedence. One statement: it creates
# the row, keeps it (the owner renewing), or takes it over when it expired or when the caller's
# release is higher. A new owner gets a new token from a sequence that never repeats.
# Params: namespace, node, release, lease seconds.
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
RETURNING token, expires_at
"""

# An operator's forced takeover (e.g. a rollback to a lower release): always wins, new token.
FORCE_LEASE = """
INSERT INTO runnerq_periodic_lease AS l (namespace, owner, release, token, acquired_at, renewed_at, expires_at)
VALUES (%(namespace)s, %(node)s, %(release)s, nextval('runnerq_periodic_lease_token_seq'), now(), now(),
        now() + make_interval(secs => %(seconds)s))
ON CONFLICT (namespace) DO UPDATE SET
    owner = EXCLUDED.owner, release = EXCLUDED.release, token = EXCLUDED.token,
    acquired_at = now(), renewed_at = now(), expires_at = EXCLUDED.expires_at
RETURNING token, expires_at
"""

# Give the lease up on a clean shutdown so another process takes over at once (token kept: the
# next owner bumps it).
RELEASE_LEASE = """
UPDATE runnerq_periodic_lease SET expires_at = now() - interval '1 microsecond'
WHERE namespace = %(namespace)s AND owner = %(node)s AND token = %(token)s
"""

READ_LEASE = """
SELECT owner, release, token, acquired_at, renewed_at, expires_at, expires_at < now() AS expired
FROM runnerq_periodic_lease WHERE namespace = %(namespace)s
"""

# The fencing check, inside the enqueue's transaction. FOR SHARE makes a takeover (an UPDATE of
# this row) wait until the enqueue commits, so "check, then enqueue" cannot interleave with it.
CHECK_FENCE = """
SELECT 1 FROM runnerq_periodic_lease
WHERE namespace = %(namespace)s AND owner = %(node)s AND token = %(token)s
FOR SHARE
"""

# The once-only guard of an occurrence. No row back means someone already enqueued it.
CLAIM_OCCURRENCE = """
INSERT INTO runnerq_periodic_occurrences (idempotency_key, namespace, job_id, occurrence, node, token, enqueued_at)
VALUES (%(key)s, %(namespace)s, %(job_id)s, %(occurrence)s, %(node)s, %(token)s, now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key
"""

SET_OCCURRENCE_ACTIVITY = """
UPDATE runnerq_periodic_occurrences SET activity_id = %(activity_id)s WHERE idempotency_key = %(key)s
"""

MARK_SENT = """
UPDATE runnerq_periodic_occurrences SET sent_at = now(), task_id = %(task_id)s WHERE idempotency_key = %(key)s
"""

UNCLAIM_OCCURRENCE = """
DELETE FROM runnerq_periodic_occurrences WHERE idempotency_key = %(key)s AND sent_at IS NULL
"""

# Guarded beat occurrences that never reached the broker (a crash between guard and send).
UNSENT_OCCURRENCES = """
SELECT job_id, occurrence, node, enqueued_at FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND sent_at IS NULL AND task_id IS NULL
  AND enqueued_at < now() - make_interval(secs => %(older_than)s) AND occurrence >= %(since)s
ORDER BY occurrence
"""

# Evidence: the last enqueued occurrence of each job (exact, unlike an evicted cache record).
LAST_OCCURRENCES = """
SELECT job_id, max(occurrence) FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND job_id = ANY(%(job_ids)s)
GROUP BY job_id
"""

# Job ids with enqueued occurrences in the namespace (the orphaned-progress check).
RECENT_JOB_IDS = """
SELECT job_id, max(occurrence) FROM runnerq_periodic_occurrences
WHERE namespace = %(namespace)s AND occurrence > %(since)s
GROUP BY job_id
"""

COUNT_REPAIR = """
INSERT INTO runnerq_periodic_repairs (namespace, job_id, reason, day, count, last_at)
VALUES (%(namespace)s, %(job_id)s, %(reason)s, (now() AT TIME ZONE 'UTC')::date, 1, now())
ON CONFLICT (namespace, job_id, reason, day) DO UPDATE
SET count = runnerq_periodic_repairs.count + 1, last_at = now()
"""

REPAIR_COUNTS = """
SELECT job_id, reason, sum(count)::bigint, max(last_at) FROM runnerq_periodic_repairs
WHERE namespace = %(namespace)s GROUP BY job_id, reason
"""

# Keep the guard rows for longer than any occurrence may still be enqueued (grace + skew), and
# always the newest row of each job (the evidence).
PRUNE_OCCURRENCES = """
DELETE FROM runnerq_periodic_occurrences o
WHERE o.ctid = ANY(ARRAY(
    SELECT ctid FROM runnerq_periodic_occurrences x
    WHERE x.namespace = %(namespace)s AND x.occurrence < %(before)s
      AND x.occurrence < (SELECT max(m.occurrence) FROM runnerq_periodic_occurrences m
                          WHERE m.namespace = x.namespace AND m.job_id = x.job_id)
    LIMIT %(batch)s))
"""

DB_NOW = "SELECT now()"
