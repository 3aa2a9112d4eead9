"""The statements of the operator commands (``storage.commands``) and their ledger, by name.

Parameters are positional (``%s``) unless a statement says otherwise; ids travel as one
``uuid[]`` array. The command engine locks its targets first (``LOCK_TARGETS``), so every write
below touches rows this transaction already holds.
"""

from __future__ import annotations

from runnerq_django.storage.sql.batches import DELETE_FOR_TREES
from runnerq_django.storage.sql.common import RESULT_COLUMNS, RESULT_UPSERT, TERMINAL

# Delete a batch of ledger rows older than the window, oldest first (idx_runnerq_commands_created).
PRUNE_LEDGER = """
DELETE FROM runnerq_commands WHERE ctid IN (SELECT ctid FROM runnerq_commands
 WHERE created_at < now() - make_interval(secs => %s) ORDER BY created_at LIMIT %s)
"""

# Claim a command id's ledger slot; no row back means it was recorded already (a replay).
CLAIM_LEDGER = """
INSERT INTO runnerq_commands (queue_name, command_id, fingerprint, kind, result)
VALUES (%s, %s, %s, %s, '{}'::jsonb) ON CONFLICT (queue_name, command_id) DO NOTHING RETURNING 1
"""

# The recorded input fingerprint, kind and outcome of a command id (for a replay).
READ_LEDGER = (
    "SELECT fingerprint, kind, result FROM runnerq_commands WHERE queue_name = %s AND command_id = %s"
)

# Record a command's outcome in the slot it claimed.
STORE_LEDGER = "UPDATE runnerq_commands SET result = %s::jsonb WHERE queue_name = %s AND command_id = %s"

# The targets of a dry run, in id order, unlocked.
READ_TARGETS = """
SELECT id, status, parent_activity_id, current_worker_id FROM runnerq_activities
 WHERE queue_name = %s AND id = ANY(%s::uuid[]) ORDER BY id"""

# The targets of a command, locked in id order (a stable order keeps commands from deadlocking).
LOCK_TARGETS = READ_TARGETS + " FOR UPDATE"

# Every descendant of the parents (via idx_runnerq_parent_id), whatever its status.
DESCENDANTS = """
WITH RECURSIVE d(id) AS (
    SELECT id FROM runnerq_activities WHERE queue_name = %s AND parent_activity_id = ANY(%s::uuid[])
    UNION
    SELECT a.id FROM runnerq_activities a JOIN d ON a.parent_activity_id = d.id WHERE a.queue_name = %s
)
SELECT id FROM d
"""

# One spec event per activity: ids, event types and JSON details as three parallel arrays.
INSERT_EVENTS = """
INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)
SELECT t.id, %s, t.event_type, NULL, t.detail::jsonb
  FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS t(id, event_type, detail)
"""

# Announce on a channel (a queue's result channel with a batch of ids as the payload).
NOTIFY = "SELECT pg_notify(%s, %s)"

# Announce runnable work on a queue's work channel.
NOTIFY_WORK = "SELECT pg_notify(%s, '')"

# Cancel: finished now, the running claim fenced out (its token moves to last_worker_id).
CANCEL = """
UPDATE runnerq_activities
   SET status = 'cancelled', completed_at = now(),
       last_worker_id = COALESCE(current_worker_id, last_worker_id), current_worker_id = NULL,
       lease_deadline_ms = NULL, waiting_result_id = NULL,
       last_error = %s, last_error_at = now()
 WHERE queue_name = %s AND id = ANY(%s::uuid[])
"""

# The cancelled activities' Err results (one JSON error for all), overwriting older ones.
CANCEL_RESULTS = f"""
INSERT INTO runnerq_results {RESULT_COLUMNS}
SELECT t.id, %s, 'Err', %s::jsonb, t.id, NULL, 'json-v1' FROM unnest(%s::uuid[]) AS t(id)
{RESULT_UPSERT}
"""

# Retry / redrive: back to pending, claim and wait cleared; %s resets the attempt count.
RETRY = """
UPDATE runnerq_activities
   SET status = 'pending', completed_at = NULL, started_at = NULL, scheduled_at = NULL,
       current_worker_id = NULL, lease_deadline_ms = NULL, waiting_result_id = NULL,
       retry_count = CASE WHEN %s THEN 0 ELSE retry_count END
 WHERE queue_name = %s AND id = ANY(%s::uuid[])
"""

# The retried activities' own results (checkpoints and signals have other ids and stay).
DELETE_RESULTS = "DELETE FROM runnerq_results WHERE queue_name = %s AND activity_id = ANY(%s::uuid[])"

# Run now: scheduled work due at the database clock's now(); waiting work pending again.
RUN_NOW = """
UPDATE runnerq_activities
   SET status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END,
       scheduled_at = CASE WHEN status = 'waiting' THEN NULL ELSE now() END,
       waiting_result_id = CASE WHEN status = 'waiting' THEN NULL ELSE waiting_result_id END
 WHERE queue_name = %s AND id = ANY(%s::uuid[])
"""

# Reschedule to an instant; each row says whether it is due already.
RESCHEDULE = """
UPDATE runnerq_activities SET scheduled_at = %s::timestamptz WHERE queue_name = %s AND id = ANY(%s::uuid[])
RETURNING scheduled_at <= now()
"""

# Set the priority of the targets.
SET_PRIORITY = "UPDATE runnerq_activities SET priority = %s WHERE queue_name = %s AND id = ANY(%s::uuid[])"

# The tree rooted at %(root)s (SPEC.md column contract): the root, and its descendants through
# idx_runnerq_root_children.
_TREE = """
    SELECT a.id, a.idempotency_key FROM runnerq_activities a
     WHERE a.queue_name = %(queue)s
       AND (a.id = %(root)s OR (a.root_activity_id = %(root)s AND a.parent_activity_id IS NOT NULL))
"""

# Whether any member of the tree is unfinished.
TREE_UNFINISHED = f"""
SELECT EXISTS (SELECT 1 FROM ({_TREE}) t JOIN runnerq_activities a ON a.id = t.id
 WHERE a.status NOT IN {TERMINAL})
"""

# Lock the tree's idempotency keys (a spawn reusing one holds it while registering its dependency).
LOCK_TREE_KEYS = f"""
SELECT 1 FROM runnerq_idempotency k JOIN ({_TREE}) t
    ON k.queue_name = %(queue)s AND k.idempotency_key = t.idempotency_key AND k.activity_id = t.id
   FOR UPDATE OF k
"""

# A live activity in another, unfinished tree that waits on a result in this tree (a pin).
TREE_PINNED_BY = f"""
SELECT w.id FROM ({_TREE}) t
  JOIN runnerq_dependencies d ON d.queue_name = %(queue)s AND d.result_id = t.id
                             AND d.producer_activity_id = t.id
  JOIN runnerq_activities w ON w.id = d.waiter_activity_id AND w.queue_name = %(queue)s
 WHERE w.root_activity_id IS DISTINCT FROM %(root)s
   AND EXISTS (SELECT 1 FROM runnerq_activities live
                WHERE live.queue_name = %(queue)s
                  AND (live.id = w.root_activity_id
                       OR (live.root_activity_id = w.root_activity_id AND live.parent_activity_id IS NOT NULL))
                  AND live.status NOT IN {TERMINAL})
 LIMIT 1
"""

# Delete a tree with its inputs, results (checkpoints and signals included), events, progress
# and published events, forks and batch runs (a batch's row goes with its last member), dependencies and idempotency keys, in one statement.
DELETE_TREE = f"""
WITH tree AS ({_TREE}),
del_dependencies AS (
    DELETE FROM runnerq_dependencies WHERE queue_name = %(queue)s
       AND (waiter_activity_id IN (SELECT id FROM tree)
            OR (result_id IN (SELECT id FROM tree) AND producer_activity_id IS NOT NULL))
),
del_results AS (
    DELETE FROM runnerq_results WHERE queue_name = %(queue)s
       AND (activity_id IN (SELECT id FROM tree) OR owner_activity_id IN (SELECT id FROM tree))
),
del_events AS (
    DELETE FROM runnerq_events WHERE queue_name = %(queue)s AND activity_id IN (SELECT id FROM tree)
),
del_progress AS (
    DELETE FROM runnerq_progress WHERE activity_id IN (SELECT id FROM tree)
),
del_published AS (
    DELETE FROM runnerq_published_events WHERE activity_id IN (SELECT id FROM tree)
),
del_forks AS (
    DELETE FROM runnerq_forks WHERE fork_id IN (SELECT id FROM tree)
),
del_batch_runs AS ({DELETE_FOR_TREES.format(ids="SELECT id FROM tree")}),
del_keys AS (
    DELETE FROM runnerq_idempotency k USING tree
     WHERE k.queue_name = %(queue)s AND k.idempotency_key = tree.idempotency_key
       AND k.activity_id = tree.id
),
del_inputs AS (
    DELETE FROM runnerq_inputs WHERE activity_id IN (SELECT id FROM tree)
)
DELETE FROM runnerq_activities WHERE queue_name = %(queue)s AND id IN (SELECT id FROM tree)
"""
