"""Retention (``storage.retention``): which finished trees are past their window, their deletion
in batches, and the events window.
"""

from __future__ import annotations

from runnerq_django.storage.sql.batches import DELETE_FOR_TREES
from runnerq_django.storage.sql.common import TERMINAL

# The retention classes: each finished status of a root, with the window parameter it ages with.
RETENTION_CLASSES = (
    ("completed", "completed_s"),
    ("failed", "failed_s"),
    ("dead_letter", "failed_s"),
    ("cancelled", "failed_s"),
)


def _past_window(status: str, window: str) -> str:
    """Roots ``r`` of one status finished longer ago than ``window`` (idx_runnerq_root_terminal)."""
    return f"""r.queue_name = %(queue)s AND r.parent_activity_id IS NULL AND r.status = '{status}'
          AND r.completed_at < now() - make_interval(secs => %({window})s)"""


def count_past_window(windows: list[str]) -> str:
    """How many finished roots are past the given windows (``completed_s``, ``failed_s``), kept
    roots included: the upper bound a retention dry run reports."""
    return "SELECT " + " + ".join(
        f"(SELECT count(*) FROM runnerq_activities r WHERE {_past_window(status, window)})"
        for status, window in RETENTION_CLASSES
        if window in windows
    )


def _eligible_roots(status: str, window: str) -> str:
    """Finished roots of one status older than ``window``, oldest first, through
    ``idx_runnerq_root_terminal`` (queue, status, completed_at). A root stays while any
    descendant is unfinished, or while a live activity outside awaits one of its members (the
    "pinned" rule: ``producer_activity_id = result_id`` rows of ``runnerq_dependencies``)."""
    return f"""
    SELECT * FROM (
        SELECT r.id FROM runnerq_activities r
        WHERE {_past_window(status, window)}
          AND NOT EXISTS (
              SELECT 1 FROM runnerq_activities c
              WHERE c.root_activity_id = r.id AND c.parent_activity_id IS NOT NULL
                AND c.status NOT IN {TERMINAL})
          AND NOT EXISTS (
              SELECT 1 FROM runnerq_activities m
              JOIN runnerq_dependencies d
                ON d.queue_name = %(queue)s AND d.result_id = m.id AND d.producer_activity_id = m.id
              JOIN runnerq_activities w ON w.id = d.waiter_activity_id
              WHERE (m.id = r.id OR (m.root_activity_id = r.id AND m.parent_activity_id IS NOT NULL))
                AND w.status NOT IN {TERMINAL})
        ORDER BY r.completed_at
        LIMIT %(batch)s
        FOR UPDATE OF r SKIP LOCKED
    ) s"""


def cleanup_trees(completed: bool, failed: bool) -> str:
    """Delete up to ``batch`` finished trees and everything they own, in one statement.

    ``completed``/``failed`` say which retention classes are on (a window of 0 turns its class
    off); ``dead_letter`` and ``cancelled`` roots age with the failed window.
    """
    on = {"completed_s": completed, "failed_s": failed}
    branches = [_eligible_roots(status, window) for status, window in RETENTION_CLASSES if on[window]]
    union = "\n    UNION ALL\n".join(branches)
    return f"""
WITH roots AS (
    SELECT id FROM ({union}
    ) eligible
    LIMIT %(batch)s
),
members AS (
    SELECT a.id, a.idempotency_key FROM runnerq_activities a WHERE a.id IN (SELECT id FROM roots)
    UNION ALL
    SELECT c.id, c.idempotency_key FROM runnerq_activities c
    WHERE c.root_activity_id IN (SELECT id FROM roots) AND c.parent_activity_id IS NOT NULL
),
activities AS (DELETE FROM runnerq_activities WHERE id IN (SELECT id FROM members)),
inputs AS (DELETE FROM runnerq_inputs WHERE activity_id IN (SELECT id FROM members)),
events AS (DELETE FROM runnerq_events WHERE activity_id IN (SELECT id FROM members)),
progress AS (DELETE FROM runnerq_progress WHERE activity_id IN (SELECT id FROM members)),
published AS (DELETE FROM runnerq_published_events WHERE activity_id IN (SELECT id FROM members)),
forks AS (DELETE FROM runnerq_forks WHERE fork_id IN (SELECT id FROM members)),
batch_runs AS ({DELETE_FOR_TREES.format(ids="SELECT id FROM members")}),
results AS (
    DELETE FROM runnerq_results
    WHERE activity_id IN (SELECT id FROM members) OR owner_activity_id IN (SELECT id FROM members)
),
dependencies AS (
    DELETE FROM runnerq_dependencies
    WHERE queue_name = %(queue)s
      AND (waiter_activity_id IN (SELECT id FROM members) OR result_id IN (SELECT id FROM members))
),
keys AS (
    DELETE FROM runnerq_idempotency k USING members m
    WHERE k.queue_name = %(queue)s AND k.idempotency_key = m.idempotency_key AND k.activity_id = m.id
)
SELECT count(*) FROM roots
"""


# The events window: events of finished (or deleted) activities older than the window, oldest
# first along idx_runnerq_events_queue_seq. Event ids grow with time, so the scan stops at the
# first event younger than the window (the horizon) instead of walking the queue's whole history.
CLEANUP_EVENTS = f"""
WITH horizon AS (
    SELECT COALESCE((
        SELECT e.id FROM runnerq_events e
        WHERE e.queue_name = %(queue)s AND e.created_at >= now() - make_interval(secs => %(events_s)s)
        ORDER BY e.id LIMIT 1), 9223372036854775807) AS id
),
doomed AS (
    SELECT e.id FROM runnerq_events e, horizon h
    WHERE e.queue_name = %(queue)s AND e.id < h.id
      AND e.created_at < now() - make_interval(secs => %(events_s)s)
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities a
                      WHERE a.id = e.activity_id AND a.status NOT IN {TERMINAL})
    ORDER BY e.id
    LIMIT %(limit)s
)
DELETE FROM runnerq_events WHERE id IN (SELECT id FROM doomed)
"""
