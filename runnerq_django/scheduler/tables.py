"""The tables of runtime schedules: periodic jobs kept in Postgres (and edited in the admin or
through ``runnerq_django.schedules``) beside the ones declared in code.

The app's own tables, not part of the RunnerQ catalog: Go and TypeScript workers neither read nor
need them (what a schedule enqueues is an ordinary activity). ``runnerq_schedules`` holds one row
per schedule; ``runnerq_schedule_changes`` is its history (who changed what, when, and every
"run now"), written in the transaction of the change.

The database keeps three columns itself (migration ``0012_runtime_schedules``'s triggers), so a
write through the ORM, the admin or plain SQL cannot forget them:

- ``revision``: 1 on insert, bumped by every update that changes anything but the bookkeeping
  columns;
- ``change_seq``: a fresh value of ``runnerq_schedules_change_seq`` with every revision, so
  ``(count(*), max(change_seq))`` changes with every insert, change and delete -- the scheduler's
  cheap check, once per tick;
- ``timing_changed_at``: ``now()`` on insert and whenever the timing (kind, cron, zone, interval,
  anchor, instant, start, end) changes. No occurrence before it is enqueued: an edit never
  reaches back into the past of the new timing.

Internal: read and write them through ``runnerq_django.schedules``.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

KINDS = [("cron", "cron"), ("interval", "interval"), ("once", "once")]


class RuntimeSchedule(models.Model):
    """One schedule kept in Postgres: what a declared ``@periodic`` job says, as a row."""

    id = models.TextField(primary_key=True, help_text="Stable id; shares the namespace of declared jobs.")
    activity = models.TextField(help_text="The activity type each occurrence enqueues.")
    payload = models.JSONField(null=True, blank=True, help_text="The JSON payload of every occurrence.")
    queue = models.TextField(null=True, blank=True, help_text="Empty: the handler's queue, else the default.")
    priority = models.SmallIntegerField(null=True, blank=True, help_text="1..4; empty: the handler's.")
    kind = models.TextField(choices=KINDS, default="cron")
    cron = models.TextField(blank=True, default="", help_text="croniter syntax (kind cron).")
    tz = models.TextField(default="UTC", help_text="IANA time zone of the cron expression.")
    every_seconds = models.BigIntegerField(null=True, blank=True, help_text="Period (kind interval).")
    anchor = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Interval anchor: occurrences are anchor + k x every (default the epoch).",
    )
    at = models.DateTimeField(null=True, blank=True, help_text="The one instant (kind once).")
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True, help_text="Off: paused (occurrences are held).")
    misfire_grace_seconds = models.BigIntegerField(default=3600)
    coalesce = models.BooleanField(default=True)
    max_catch_up = models.IntegerField(default=10)
    catch_up_after_repair = models.BooleanField(default=True)
    jitter_seconds = models.IntegerField(
        default=0, help_text="Each occurrence runs up to this many seconds late (the same delay everywhere)."
    )
    max_occurrences = models.BigIntegerField(
        null=True, blank=True, help_text="Stop after this many enqueued occurrences (empty: no cap)."
    )
    occurrence_count = models.BigIntegerField(default=0, help_text="Occurrences enqueued so far.")
    description = models.TextField(blank=True, default="")
    revision = models.BigIntegerField(default=1, help_text="Bumped by every change (by the database).")
    change_seq = models.BigIntegerField(default=0)
    timing_changed_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    created_by = models.TextField(blank=True, default="")
    updated_by = models.TextField(blank=True, default="")

    class Meta:
        db_table = "runnerq_schedules"
        verbose_name = "schedule"
        indexes = [models.Index(fields=["change_seq"], name="runnerq_schedules_seq")]

    def __str__(self) -> str:
        return self.id


class ScheduleChange(models.Model):
    """One change of a schedule (or one "run now"): who, what (field: [before, after]), when."""

    id = models.BigAutoField(primary_key=True)
    schedule_id = models.TextField()
    revision = models.BigIntegerField(null=True, blank=True)
    action = models.TextField()  # created / updated / paused / resumed / deleted / run_now / imported
    actor = models.TextField()
    reason = models.TextField(blank=True, default="")
    changes = models.JSONField(default=dict)
    activity_id = models.UUIDField(null=True, blank=True)
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runnerq_schedule_changes"
        indexes = [models.Index(fields=["schedule_id", "-at"], name="runnerq_schedule_changes_id")]

    def __str__(self) -> str:
        return f"{self.action} {self.schedule_id} by {self.actor}"


__all__ = ["KINDS", "RuntimeSchedule", "ScheduleChange"]
