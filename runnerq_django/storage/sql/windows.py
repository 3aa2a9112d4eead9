"""Debounce and throttle (``storage.windows``): the window row of a key in the app's own table
``runnerq_debounce`` (take it, lock it, point it at another activity, count a collapse), and the
one move of a spec row a debounce makes: a pending debounced activity's ``scheduled_at`` later
and its input replaced, both while it is ``scheduled`` and not yet due.
"""

from __future__ import annotations

# The WHERE clause naming one window: its queue, activity type, kind and key.
_KEY = """queue_name = %(queue)s AND activity_type = %(activity_type)s AND kind = %(kind)s
   AND key = %(key)s"""

# Take the key's window for a new activity; a concurrent taker makes this wait for its commit
# (primary key), so two enqueues of one key never both create. run_at: when the activity runs
# (a debounce's scheduled time; a throttle's window start, now).
TAKE_WINDOW = """
INSERT INTO runnerq_debounce AS d
    (queue_name, activity_type, kind, key, activity_id, first_at, last_at, run_at, wait_ms,
     max_wait_ms, collapsed)
VALUES (%(queue)s, %(activity_type)s, %(kind)s, %(key)s, %(id)s, now(), now(),
        now() + %(delay_ms)s * interval '1 millisecond', %(wait_ms)s, %(max_wait_ms)s, 0)
ON CONFLICT (queue_name, activity_type, kind, key) DO NOTHING
RETURNING activity_id
"""

# The key's window, locked until commit (every enqueue of the key after the first waits here),
# read in a statement of its own so its snapshot sees a window a concurrent enqueue committed
# while this one waited. A throttle reads where now() falls: before the window's start (its
# activity was deferred to it), inside it, or past its end; and the delay from now to the next
# window's start.
LOCK_WINDOW = f"""
SELECT activity_id,
       run_at > now() AS ahead,
       now() >= run_at + %(wait_ms)s * interval '1 millisecond' AS over,
       GREATEST(0, (extract(epoch FROM run_at - now()) * 1000)::float8 + %(wait_ms)s) AS next_delay_ms
FROM runnerq_debounce WHERE {_KEY}
FOR UPDATE
"""

# Debounce an enqueue into the key's pending activity, when it is still scheduled, unclaimed and
# not yet due (its new time is later than now too: a claim racing this statement finds it not
# due on its recheck, so never reads the input it replaces): scheduled_at to the later of now +
# wait, capped at the group's first enqueue + max_wait; the input replaced (last payload wins);
# the window's count of collapsed enqueues up by one. The id, or no row when the group is over
# (claimed, finished, gone, due): the caller starts a new one.
COLLAPSE = f"""
WITH target AS (
    SELECT d.activity_id,
           LEAST(now() + %(wait_ms)s * interval '1 millisecond',
                 COALESCE(d.first_at + d.max_wait_ms * interval '1 millisecond', 'infinity')) AS run_at
    FROM runnerq_debounce d WHERE {_KEY.replace("queue_name", "d.queue_name")}
),
moved AS (
    UPDATE runnerq_activities a SET scheduled_at = t.run_at
    FROM target t
    WHERE a.id = t.activity_id AND a.queue_name = %(queue)s
      AND a.status = 'scheduled' AND a.current_worker_id IS NULL
      AND a.scheduled_at > now() AND t.run_at > now()
    RETURNING a.id, a.scheduled_at
),
input AS (
    UPDATE runnerq_inputs i SET payload = %(payload)s::jsonb, serialization = 'json-v1'
    FROM moved WHERE i.activity_id = moved.id AND i.queue_name = %(queue)s
),
counted AS (
    UPDATE runnerq_debounce d SET last_at = now(), run_at = moved.scheduled_at,
           wait_ms = %(wait_ms)s, collapsed = d.collapsed + 1
    FROM moved WHERE {_KEY.replace("queue_name", "d.queue_name")}
)
SELECT id FROM moved
"""

# Count an enqueue that returned the window's activity without a change (a throttle's drop, or
# an enqueue inside a window whose activity was deferred to it).
COUNT_COLLAPSED = f"""
UPDATE runnerq_debounce SET last_at = now(), collapsed = collapsed + 1 WHERE {_KEY}
"""

# Point the key's window at a new activity: a new debounce group, or a throttle's new window
# (starting now, or, deferred, when the current one ends: now + delay_ms).
REPOINT_WINDOW = f"""
UPDATE runnerq_debounce SET activity_id = %(id)s, first_at = now(), last_at = now(),
       run_at = now() + %(delay_ms)s * interval '1 millisecond', wait_ms = %(wait_ms)s,
       max_wait_ms = %(max_wait_ms)s, collapsed = 0
WHERE {_KEY}
"""

# Retention of windows: rows whose window ended longer ago than the horizon and whose activity
# is not waiting to run; at most %(batch)s per statement.
SWEEP_WINDOWS = """
DELETE FROM runnerq_debounce WHERE ctid = ANY(ARRAY(
    SELECT d.ctid FROM runnerq_debounce d
    WHERE d.run_at + d.wait_ms * interval '1 millisecond'
          < now() - %(older_than_seconds)s * interval '1 second'
      AND NOT EXISTS (SELECT 1 FROM runnerq_activities a
                      WHERE a.id = d.activity_id AND a.status = 'scheduled')
    LIMIT %(batch)s))
"""

# The columns of a window as the admin shows it.
_WINDOW_COLUMNS = """queue_name, activity_type, kind, key, activity_id, first_at, last_at, run_at,
       wait_ms, max_wait_ms, collapsed"""

# The window whose activity is %(id)s (the admin's activity page; runnerq_debounce_activity).
WINDOW_OF_ACTIVITY = f"""
SELECT {_WINDOW_COLUMNS} FROM runnerq_debounce WHERE activity_id = %(id)s LIMIT 1
"""

# The windows of the admin's list, the most recently enqueued first (%(kind)s NULL: both kinds);
# runnerq_debounce_last.
RECENT_WINDOWS = f"""
SELECT {_WINDOW_COLUMNS} FROM runnerq_debounce
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY last_at DESC LIMIT %(limit)s
"""

# How many windows there are, by kind.
WINDOW_COUNTS = "SELECT kind, count(*) FROM runnerq_debounce GROUP BY kind"
