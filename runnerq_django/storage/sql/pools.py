"""The worker pools' rows (``runnerq_worker_pools``, ``storage.pools``): register, heartbeat,
deregister, prune, and the capacity of each queue.
"""

from __future__ import annotations

# One row per worker process and queue (runnerq_worker_pools), kept alive by heartbeat.
POOL_REGISTER = """
INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, activity_types)
VALUES (%(pool_id)s, %(queue)s, %(max_workers)s, %(activity_types)s)
ON CONFLICT (pool_id) DO UPDATE
   SET queue_name = EXCLUDED.queue_name, max_workers = EXCLUDED.max_workers,
       activity_types = EXCLUDED.activity_types, last_seen_at = now()
"""

# Keep pool rows alive; returns the ids still registered.
POOL_HEARTBEAT = """
UPDATE runnerq_worker_pools SET last_seen_at = now() WHERE pool_id = ANY(%(ids)s::uuid[]) RETURNING pool_id
"""

# Remove pool rows on a clean shutdown; how many went.
POOL_DEREGISTER = """
WITH gone AS (DELETE FROM runnerq_worker_pools WHERE pool_id = ANY(%(ids)s::uuid[]) RETURNING 1)
SELECT count(*) FROM gone
"""

# Remove pool rows not seen for a while (dead workers); how many went.
POOL_PRUNE = """
WITH gone AS (
    DELETE FROM runnerq_worker_pools WHERE last_seen_at < now() - make_interval(secs => %(seconds)s) RETURNING 1
)
SELECT count(*) FROM gone
"""

# idx_runnerq_worker_pools_queue_alive (queue_name, last_seen_at).
POOL_CAPACITY = """
SELECT queue_name, count(*), coalesce(sum(max_workers), 0)
FROM runnerq_worker_pools
WHERE last_seen_at >= now() - make_interval(secs => %(seconds)s)
GROUP BY queue_name
"""
