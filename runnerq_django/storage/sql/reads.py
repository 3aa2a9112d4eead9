"""The read-only statements of the operator console: the admin's pages, ``runnerq_status``, the
operator commands' selections and the tasks backend's result, by name.

Written for a table of millions of activities (SPEC.md (a) "HOT / fillfactor"): statuses are SQL
literals so the planner can prove a partial index's predicate; no statement counts a whole table;
lists walk an index in its order and stop at a LIMIT. Builders take only validated statuses,
integers and the fixed fragments of ``storage.reads``, never user text.
"""

from __future__ import annotations

from runnerq_django.spec import events as ev
from runnerq_django.storage.sql.common import RUNNABLE, TERMINAL

# -- queues, types, keys ------------------------------------------------------------------------

# Where a queue has runnable work (each of these three leads an index with queue_name).
QUEUES_RUNNABLE = f"status IN {RUNNABLE}"
# Running work.
QUEUES_PROCESSING = "status = 'processing'"
# Finished roots.
QUEUES_FINISHED_ROOTS = f"parent_activity_id IS NULL AND status IN {TERMINAL}"


def loose_scan(column: str, where: str, limit: int) -> str:
    """Distinct values of an index's leading ``column`` by skipping from one value to the next
    (one index probe per value) instead of reading every entry."""
    return f"""
        WITH RECURSIVE v(x) AS (
            (SELECT {column} FROM runnerq_activities WHERE {where} ORDER BY {column} LIMIT 1)
            UNION ALL
            SELECT (SELECT a.{column} FROM runnerq_activities a WHERE {where}
                       AND a.{column} > v.x ORDER BY a.{column} LIMIT 1)
              FROM v WHERE v.x IS NOT NULL
        )
        SELECT x FROM v WHERE x IS NOT NULL LIMIT {int(limit)}
    """


# The queues that have worker pools.
POOL_QUEUES = "SELECT DISTINCT queue_name FROM runnerq_worker_pools LIMIT %s"


def _runnable_pairs(within_queues: bool) -> str:
    """``v(q, t)``: the (queue, type) pairs of runnable work, a skip scan of
    ``idx_runnerq_dequeue_effective_v2`` from one pair to the next, within ``%(queues)s`` if asked.

    Within queues, each queue is walked on its own (``queue_name = q``, types after the last
    one): with ``queue_name = ANY(...)`` and a row comparison, each step of the walk read a
    fifth of the index (18 s for 20 pairs on a backlog of 1,000,000; bench/backlog.py)."""
    if within_queues:
        return f"""
        WITH RECURSIVE v(q, t) AS (
            SELECT f.queue_name, f.activity_type
              FROM (SELECT DISTINCT u.q FROM unnest(%(queues)s::text[]) AS u(q)) u, LATERAL (
                SELECT a.queue_name, a.activity_type FROM runnerq_activities a
                 WHERE a.status IN {RUNNABLE} AND a.queue_name = u.q
                 ORDER BY a.activity_type LIMIT 1) f
            UNION ALL
            SELECT n.queue_name, n.activity_type FROM v, LATERAL (
                SELECT a.queue_name, a.activity_type FROM runnerq_activities a
                 WHERE a.status IN {RUNNABLE} AND a.queue_name = v.q AND a.activity_type > v.t
                 ORDER BY a.activity_type LIMIT 1) n
        )"""
    return f"""
        WITH RECURSIVE v(q, t) AS (
            (SELECT a.queue_name, a.activity_type FROM runnerq_activities a
              WHERE a.status IN {RUNNABLE} ORDER BY a.queue_name, a.activity_type LIMIT 1)
            UNION ALL
            SELECT n.queue_name, n.activity_type FROM v, LATERAL (
                SELECT a.queue_name, a.activity_type FROM runnerq_activities a
                 WHERE a.status IN {RUNNABLE} AND (a.queue_name, a.activity_type) > (v.q, v.t)
                 ORDER BY a.queue_name, a.activity_type LIMIT 1) n
        )"""


def runnable_types(within_queues: bool, limit: int) -> str:
    """The types of runnable work, at most ``limit`` (queue, type) pairs, within ``%(queues)s`` if
    asked."""
    return f"{_runnable_pairs(within_queues)} SELECT DISTINCT t FROM (SELECT t FROM v LIMIT {int(limit)}) s"


# For due_by_type's transaction: walk the pairs' index ranges, stopping at the cap, instead of a
# bitmap of each whole range (a pair of 50,000 due rows read all 50,000 entries to count 1,000),
# and no JIT compilation (two seconds for a plan whose cost the uncapped ranges inflate).
INDEX_WALKS_ONLY = "SET LOCAL jit = off; SET LOCAL enable_bitmapscan = off"


def due_by_type(limit: int) -> str:
    """Per (queue, type) of ``%(queues)s`` with runnable work (at most ``limit`` pairs), how much
    of it is due now (the claim's rule), counted up to ``%(cap)s``: the pair's range of the same
    index; and whether a live worker (a pool row of the queue seen in the last ``%(alive)s``
    seconds, of any SDK) handles the type (its type list has it, or is empty: every type). Pairs
    with nothing due are left out."""
    return f"""{_runnable_pairs(True)}
        SELECT p.q, p.t, d.n, EXISTS (
            SELECT 1 FROM runnerq_worker_pools w
             WHERE w.queue_name = p.q AND w.last_seen_at >= now() - make_interval(secs => %(alive)s)
               AND (COALESCE(cardinality(w.activity_types), 0) = 0 OR p.t = ANY(w.activity_types)))
          FROM (SELECT q, t FROM v LIMIT {int(limit)}) p, LATERAL (
            SELECT count(*) AS n FROM (SELECT 1 FROM runnerq_activities a
             WHERE a.queue_name = p.q AND a.activity_type = p.t AND a.status IN {RUNNABLE}
               AND COALESCE(a.scheduled_at, a.created_at) <= now() LIMIT %(cap)s) s) d
         WHERE d.n > 0 ORDER BY p.q, p.t
    """


# Activities holding one of the idempotency keys in one of the queues (primary-key probes).
IDS_FOR_KEYS = (
    "SELECT activity_id FROM runnerq_idempotency WHERE queue_name = ANY(%s) AND idempotency_key = ANY(%s)"
    " LIMIT 1000"
)

# -- counts -------------------------------------------------------------------------------------


def unfinished_probe(limit: int) -> str:
    """How many unfinished rows there are, counting no further than ``limit`` (index-only)."""
    return f"SELECT count(*) FROM (SELECT 1 FROM runnerq_activities WHERE status <> 'completed' LIMIT {int(limit)}) s"


# Per (queue, status) counts of every unfinished row, exactly (idx_runnerq_query_status).
UNFINISHED_COUNTS = (
    "SELECT queue_name, status, count(*) FROM runnerq_activities WHERE status <> 'completed' GROUP BY 1, 2"
)


def capped_status_counts(statuses: list[str], cap: int) -> str:
    """Per (status, queue) counts, each status read from its own range of the index and capped at
    ``cap`` + 1 rows. ``statuses`` are SQL literals."""
    return " UNION ALL ".join(
        f"SELECT {status} AS status, queue_name, count(*) FROM"
        f" (SELECT queue_name FROM runnerq_activities WHERE status = {status} LIMIT {int(cap) + 1}) s"
        f" GROUP BY queue_name"
        for status in statuses
    )


def rows_probe(limit: int) -> str:
    """How many activities there are, counting no further than ``limit``."""
    return f"SELECT count(*) FROM (SELECT 1 FROM runnerq_activities LIMIT {int(limit)}) s"


# Completed activities of the queues, exactly (reads the table: only done while it is small).
COMPLETED_COUNTS = (
    "SELECT queue_name, count(*) FROM runnerq_activities WHERE status = 'completed'"
    " AND queue_name = ANY(%s) GROUP BY 1"
)

# The planner's row estimate of a statement (the prefix; nothing is executed).
EXPLAIN_JSON = "EXPLAIN (FORMAT JSON) "

# Per queue, the oldest due runnable activity's COALESCE(scheduled_at, created_at) (finite, or
# NULL and its text) in a handful of probes per queue: the dequeue index is ordered (priority,
# retry_count, time) within the queue, so each (priority, retry_count) group's first entry is its
# oldest.
OLDEST_RUNNABLE = f"""
        SELECT q.name, CASE WHEN isfinite(m.t) THEN m.t END, CASE WHEN NOT isfinite(m.t) THEN m.t::text END
          FROM unnest(%(queues)s::text[]) AS q(name), LATERAL (
        WITH RECURSIVE g(priority, retry_count) AS (
            (SELECT priority, retry_count FROM runnerq_activities
              WHERE queue_name = q.name AND status IN {RUNNABLE}
              ORDER BY priority DESC, retry_count DESC LIMIT 1)
            UNION ALL
            SELECT n.priority, n.retry_count FROM g, LATERAL (
                SELECT a.priority, a.retry_count FROM runnerq_activities a
                 WHERE a.queue_name = q.name AND a.status IN {RUNNABLE}
                   AND (a.priority, a.retry_count) < (g.priority, g.retry_count)
                 ORDER BY a.priority DESC, a.retry_count DESC LIMIT 1) n
        )
        SELECT min(o.t) AS t FROM g, LATERAL (
            SELECT COALESCE(a.scheduled_at, a.created_at) AS t FROM runnerq_activities a
             WHERE a.queue_name = q.name AND a.status IN {RUNNABLE}
               AND a.priority = g.priority AND a.retry_count = g.retry_count
             ORDER BY COALESCE(a.scheduled_at, a.created_at) LIMIT 1) o
         WHERE o.t <= now()) m
    """


# Per queue of %(queues)s, the depth the metrics report, each count capped at %(cap)s rows: runnable
# work due now, pending/scheduled/retrying work not due yet, parked work not due yet, and running
# work (the dequeue index's range per queue, and idx_runnerq_query_status for the running).
QUEUE_DEPTH = f"""
        SELECT q.name,
          (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
            WHERE a.queue_name = q.name AND a.status IN {RUNNABLE}
              AND COALESCE(a.scheduled_at, a.created_at) <= now() LIMIT %(cap)s) s),
          (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
            WHERE a.queue_name = q.name AND a.status IN ('pending', 'scheduled', 'retrying')
              AND COALESCE(a.scheduled_at, a.created_at) > now() LIMIT %(cap)s) s),
          (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
            WHERE a.queue_name = q.name AND a.status = 'waiting'
              AND COALESCE(a.scheduled_at, a.created_at) > now() LIMIT %(cap)s) s),
          (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
            WHERE a.queue_name = q.name AND a.status = 'processing' LIMIT %(cap)s) s)
          FROM unnest(%(queues)s::text[]) AS q(name)
    """


def finished_roots_in_windows(statuses: list[str]) -> str:
    """Per queue of ``%(queues)s`` and status (SQL literals), roots finished in the last 5 and 60
    minutes, exactly, from ``idx_runnerq_root_terminal`` (queue, status, completed_at)."""
    return " UNION ALL ".join(
        f"""
            SELECT q.name, {status},
                   (SELECT count(*) FROM runnerq_activities a
                     WHERE a.queue_name = q.name AND a.status = {status} AND a.parent_activity_id IS NULL
                       AND a.completed_at >= now() - interval '5 minutes'),
                   (SELECT count(*) FROM runnerq_activities a
                     WHERE a.queue_name = q.name AND a.status = {status} AND a.parent_activity_id IS NULL
                       AND a.completed_at >= now() - interval '60 minutes')
              FROM unnest(%(queues)s::text[]) AS q(name)"""
        for status in statuses
    )


def finished_children_in_windows(lookback: str, cap: int) -> str:
    """Children finished in the last 5 and 60 minutes among those created in the last
    ``lookback`` (a fixed interval literal; idx_runnerq_query_created, capped at ``cap`` rows),
    with the number of rows read."""
    return f"""
        WITH recent AS (
            SELECT queue_name, status, completed_at, parent_activity_id FROM runnerq_activities
             WHERE created_at >= now() - interval '{lookback}'
             ORDER BY created_at DESC, id DESC LIMIT {int(cap) + 1})
        SELECT queue_name, status,
               count(*) FILTER (WHERE completed_at >= now() - interval '5 minutes'),
               count(*), (SELECT count(*) FROM recent)
          FROM recent
         WHERE parent_activity_id IS NOT NULL AND status IN ('completed', 'failed', 'dead_letter')
           AND completed_at >= now() - interval '60 minutes'
         GROUP BY queue_name, status
        """


# -- expressions of the admin's ORM reads (annotations, so a bad value never breaks a page) --------


def finite_time(column: str) -> tuple[str, str]:
    """A timestamp ``column`` as a value psycopg can load (``NULL`` when infinite), and its text
    when infinite."""
    return (
        f"CASE WHEN isfinite({column}) THEN {column} END",
        f"CASE WHEN NOT isfinite({column}) THEN {column}::text END",
    )


def pretty_json(expression: str, limit: int) -> tuple[str, str]:
    """A jsonb ``expression`` pretty-printed by Postgres, cut to ``limit`` characters, and its full length."""
    return f"left(jsonb_pretty({expression}), {int(limit)})", f"length(jsonb_pretty({expression}))"


def plain_json(data: str, serialization: str) -> str:
    """``spec.serialization.plain_json`` in SQL: a superjson-v1 envelope shows its ``json`` member."""
    return (
        f"CASE WHEN {serialization} = 'superjson-v1' AND jsonb_typeof({data}) = 'object'"
        f" AND jsonb_exists({data}, 'json') THEN {data} -> 'json' ELSE {data} END"
    )


def cut_text(column: str, limit: int) -> tuple[str, str]:
    """A text ``column`` cut to ``limit`` characters, and its full length."""
    return f"left({column}, {int(limit)})", f"length({column})"


# An id, type or token as the console reads it: every one the API accepts (512 bytes at most)
# whole, a longer one another SDK stored cut (admin_views.safe.ID_CHARS).
ID_CHARS = 512
# The types of a pool the console reads: the first POOL_TYPES_SHOWN, each cut to ID_CHARS.
POOL_TYPES_SHOWN = 20


def pool_types(column: str) -> tuple[str, str]:
    """A pool's ``text[]`` type list ``column`` as its first ``POOL_TYPES_SHOWN`` types, each cut
    to ``ID_CHARS`` (empty for "all types"), and the number of types in it."""
    return (
        f"ARRAY(SELECT left(t, {ID_CHARS}) FROM unnest(({column})[1:{POOL_TYPES_SHOWN}]) t)",
        f"COALESCE(cardinality({column}), 0)",
    )


# -- pools, ledger, events ----------------------------------------------------------------------

# Pool rows seen in the last hour, with whether each was seen in the last %(alive)s seconds and
# whether it serves type %(type)s (it lists it, or it serves all types): the pool's own list is
# read cut (``pool_types``).
WORKER_POOLS = f"""
SELECT pool_id, queue_name, max_workers, {pool_types("activity_types")[0]},
       CASE WHEN isfinite(started_at) THEN started_at END, CASE WHEN isfinite(last_seen_at) THEN last_seen_at END,
       last_seen_at >= now() - make_interval(secs => %(alive)s) AS alive,
       {pool_types("activity_types")[1]},
       COALESCE(cardinality(activity_types), 0) = 0 OR %(type)s::text = ANY(activity_types)
  FROM runnerq_worker_pools WHERE last_seen_at >= now() - interval '1 hour'
 ORDER BY queue_name, last_seen_at DESC LIMIT 500
"""

# The newest ledger rows; numbers as short texts and a finite time, so a row another SDK wrote
# cannot break the page.
RECENT_COMMANDS = (
    f"SELECT queue_name, left(command_id, {ID_CHARS}), left(kind, {ID_CHARS}),"
    " CASE WHEN isfinite(created_at) THEN created_at END,"
    " left(result ->> 'matched', 20), left(result ->> 'applied', 20), left(result ->> 'cascaded', 20)"
    " FROM runnerq_commands ORDER BY created_at DESC LIMIT %s"
)

# The lowest and highest event ids.
EVENT_ID_RANGE = "SELECT min(id), max(id) FROM runnerq_events"

# The first event at or after an id, with its time (a primary-key probe).
EVENT_FROM_ID = "SELECT id, created_at FROM runnerq_events WHERE id >= %s ORDER BY id LIMIT 1"

# -- operator commands --------------------------------------------------------------------------

# Expired leases of a queue (idx_runnerq_processing: queue_name WHERE status = 'processing').
EXPIRED_LEASES = (
    "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'processing'"
    " AND lease_deadline_ms < floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
)


def finished_to_retry(statuses: list[str], typed: bool) -> str:
    """Ids of a queue's activities in ``statuses`` (validated names; each a literal so
    idx_runnerq_query_status serves it), of ``%(type)s`` if ``typed``, oldest first, ``%(limit)s``."""
    of_type = " AND activity_type = %(type)s" if typed else ""
    parts = [
        f"(SELECT id, created_at FROM runnerq_activities WHERE status = '{status}' AND queue_name = %(queue)s"
        f"{of_type} ORDER BY created_at, id LIMIT %(limit)s)"
        for status in statuses
    ]
    return "SELECT id FROM (" + " UNION ALL ".join(parts) + ") s ORDER BY created_at, id LIMIT %(limit)s"


# -- a read replica ------------------------------------------------------------------------------

# Whether the server is a standby, how far its replay is behind (0 when it has replayed all it
# received; else now() - the commit time of the last transaction replayed), whether replay is
# paused, and that commit time. Functions every role may call (pg_stat_wal_receiver is not).
REPLICA_STATE = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
            ELSE greatest(0.0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))::float8
       END,
       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END,
       pg_last_xact_replay_timestamp()
"""


# -- the tasks backend --------------------------------------------------------------------------

# The events that end an attempt without a result (their details say why).
ATTEMPT_END_EVENTS = (ev.RETRYING, ev.REQUEUED, ev.FAILED, ev.DEAD_LETTER)

# A task's row, its input, its own result (step NULL) and the failure events of its attempts,
# oldest first (idx_runnerq_events_activity), in one statement.
TASK_RESULT = f"""
SELECT a.activity_type, a.status, a.created_at, a.started_at, a.completed_at, a.metadata::text,
       a.current_worker_id, a.last_worker_id, a.last_error,
       i.payload::text, i.serialization, r.state, r.data::text, r.serialization,
       (SELECT coalesce(json_agg(json_build_array(e.event_type, e.worker_id, e.detail) ORDER BY e.id), '[]')
        FROM runnerq_events e
        WHERE e.activity_id = a.id AND e.event_type IN ({", ".join(f"'{t}'" for t in ATTEMPT_END_EVENTS)}))::text
FROM runnerq_activities a
LEFT JOIN runnerq_inputs i ON i.activity_id = a.id
LEFT JOIN runnerq_results r ON r.activity_id = a.id AND r.step IS NULL
WHERE a.id = %(id)s
"""

# The stored enqueue time of a task the caller just wrote (its TaskResult's enqueued_at, the
# same value get_result reads later).
TASK_ENQUEUED_AT = "SELECT created_at FROM runnerq_activities WHERE id = %(id)s"
