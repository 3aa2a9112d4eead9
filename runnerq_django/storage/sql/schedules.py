"""The statements of runtime schedules (``runnerq_schedules``, the app's own table), by name; the
operations in ``storage.schedules`` run them. Parameters are named (``%(name)s``)."""

from __future__ import annotations

# The cheap change check of every tick: the database gives a row a new change_seq with every
# revision, so any insert, change or delete changes this pair (an index-only scan).
SCHEDULES_VERSION = "SELECT count(*), coalesce(max(change_seq), 0) FROM runnerq_schedules"

# The enabled schedules' ids and change_seq: which rows changed since the scheduler last read them.
ENABLED_SCHEDULES = "SELECT id, change_seq FROM runnerq_schedules WHERE enabled"

# Lock one schedule for an enqueue of its occurrences (inside the enqueue's transaction): what the
# tick planned with must still be the row's revision, and the cap is counted under this lock.
LOCK_SCHEDULE = """
SELECT revision, enabled, occurrence_count, max_occurrences FROM runnerq_schedules
WHERE id = %(id)s FOR UPDATE
"""

# Count the occurrences an enqueue created (bookkeeping: no revision, no change_seq).
COUNT_OCCURRENCES = """
UPDATE runnerq_schedules SET occurrence_count = occurrence_count + %(count)s WHERE id = %(id)s
"""

# Listen for the trigger's announcement of every change (migration 0012).
LISTEN_SCHEDULES = "LISTEN runnerq_schedules"

# django-celery-beat's periodic tasks with their schedules (runnerq_import_beat): its own tables,
# read as they are (django-celery-beat need not be installed).
BEAT_TASKS = """
SELECT t.id, t.name, t.task, t.args, t.kwargs, t.queue, t.expires, t.expire_seconds, t.enabled,
       t.one_off, t.start_time, t.priority, t.description,
       c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week, c.timezone,
       i.every, i.period,
       s.event, k.clocked_time
FROM django_celery_beat_periodictask t
LEFT JOIN django_celery_beat_crontabschedule c ON c.id = t.crontab_id
LEFT JOIN django_celery_beat_intervalschedule i ON i.id = t.interval_id
LEFT JOIN django_celery_beat_solarschedule s ON s.id = t.solar_id
LEFT JOIN django_celery_beat_clockedschedule k ON k.id = t.clocked_id
ORDER BY t.name
"""
# The names of BEAT_TASKS's columns, in order (the importer reads its rows as dicts).
BEAT_TASK_COLUMNS = [
    "id",
    "name",
    "task",
    "args",
    "kwargs",
    "queue",
    "expires",
    "expire_seconds",
    "enabled",
    "one_off",
    "start_time",
    "priority",
    "description",
    "minute",
    "hour",
    "day_of_month",
    "month_of_year",
    "day_of_week",
    "timezone",
    "every",
    "period",
    "event",
    "clocked_time",
]
