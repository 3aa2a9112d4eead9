"""``manage.py runnerq_import_beat``: django-celery-beat's periodic tasks as runtime schedules.

It reads django-celery-beat's tables (``django_celery_beat_periodictask`` and its
crontab, interval, solar and clocked schedules; ``storage.schedules.beat_tasks``), so the package need not be installed where the
import runs, only its tables present. Each task becomes one schedule (``schedules.create``, so the
declared jobs' rules apply and the history records ``--by``), or is reported with why it could not:

- **the task**: mapped to an activity type when a registered ``@activity`` has the task's name,
  when the task's dotted path is an ``@activity`` handler, or by ``--map task.name=ActivityType``;
- **the timing**: a crontab (with its zone) is a cron schedule; an interval (days, hours,
  minutes, seconds) an interval anchored at the task's ``start_time`` (else the epoch); a clocked
  schedule a one-off (``at``); a solar schedule cannot be mapped (RunnerQ has no solar timing);
- **arguments**: ``kwargs`` alone become the payload (an object), ``args`` alone a list; both at
  once cannot be mapped (an activity takes one payload);
- ``queue`` is kept, ``one_off`` is ``max_occurrences=1``, ``start_time`` is ``start``,
  ``expires`` is ``end``, ``expire_seconds`` is the misfire grace, ``enabled`` and
  ``description`` are kept; Celery's ``priority`` (0-255) is not mapped (noted);
- **the id**: ``--prefix`` (default ``celery.``) and the task's name, characters an id cannot hold
  replaced by ``-``. A task whose schedule exists already is skipped (a second import changes
  nothing).

Internal: not part of the public API.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

PERIOD_SECONDS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}


@dataclass
class Outcome:
    name: str  # the PeriodicTask's name
    schedule_id: str | None
    status: str  # created / would_create / exists / skipped
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        fields = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.fields.items()}
        return {
            "name": self.name,
            "schedule_id": self.schedule_id,
            "status": self.status,
            "reason": self.reason,
            "notes": self.notes,
            "fields": fields,
        }


class NotMapped(Exception):
    """Why a task could not become a schedule."""


def schedule_id_for(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_.:-]+", "-", name).strip("-")


def activity_for(task: str, mapping: dict[str, str]) -> str:
    from importlib import import_module

    from runnerq_django.activities.registry import ActivityDefinition, registry

    if task in mapping:
        return mapping[task]
    if registry.get(task) is not None:
        return task
    module, _, attr = task.rpartition(".")
    if module:
        try:
            found = getattr(import_module(module), attr)
        except (ImportError, AttributeError):
            found = None
        if isinstance(found, ActivityDefinition):
            return found.name
    raise NotMapped(
        f"task {task!r} is no registered @activity (by name or dotted path); map it with --map {task}=ActivityType"
    )


def _loads(text: Any, what: str) -> Any:
    if text in (None, ""):
        return None
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError as exc:
        raise NotMapped(f"{what} is not JSON: {exc}") from None


def fields_for(row: dict[str, Any], mapping: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The ``schedules.create`` arguments of one task, and notes on what was left out."""
    notes: list[str] = []
    fields: dict[str, Any] = {"activity": activity_for(row["task"], mapping)}
    if row["minute"] is not None:
        fields["cron"] = " ".join(
            str(row[name]) for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        )
        fields["tz"] = str(row["timezone"] or "UTC")
    elif row["every"] is not None:
        if row["period"] not in PERIOD_SECONDS:
            raise NotMapped(f"an interval in {row['period']!r}: RunnerQ intervals are whole seconds")
        fields["every"] = int(row["every"]) * PERIOD_SECONDS[row["period"]]
        if row["start_time"] is not None:
            fields["anchor"] = row["start_time"].replace(microsecond=0)
    elif row["clocked_time"] is not None:
        fields["at"] = row["clocked_time"].replace(microsecond=0)
    elif row["event"] is not None:
        raise NotMapped(f"a solar schedule ({row['event']}): RunnerQ has no solar timing")
    else:
        raise NotMapped("no schedule (no crontab, interval, solar or clocked schedule)")
    args = _loads(row["args"], "args") or []
    kwargs = _loads(row["kwargs"], "kwargs") or {}
    if args and kwargs:
        raise NotMapped("both args and kwargs: an activity takes one payload (kwargs or args)")
    if kwargs or args:
        fields["payload"] = kwargs or args
    if row["queue"]:
        fields["queue"] = row["queue"]
    if row["one_off"]:
        fields["max_occurrences"] = 1
    if row["start_time"] is not None and "at" not in fields:
        fields["start"] = row["start_time"]
    if row["expires"] is not None:
        fields["end"] = row["expires"]
    if row["expire_seconds"]:
        fields["misfire_grace"] = int(row["expire_seconds"])
    if row["priority"] is not None:
        notes.append(f"Celery priority {row['priority']} not mapped (RunnerQ priorities are 1..4)")
    fields["enabled"] = bool(row["enabled"])
    if row["description"]:
        fields["description"] = str(row["description"])
    return fields, notes


def import_beat(
    *,
    using: str,
    mapping: dict[str, str],
    prefix: str = "celery.",
    dry_run: bool = False,
    actor: str | None = None,
) -> list[Outcome]:
    """One :class:`Outcome` per django-celery-beat task, in name order."""
    from runnerq_django.models import RuntimeSchedule
    from runnerq_django.scheduler import rows
    from runnerq_django.storage import schedules as store

    found = store.beat_tasks(using=using)
    existing = set(RuntimeSchedule.objects.values_list("pk", flat=True))
    outcomes: list[Outcome] = []
    for row in found:
        schedule_id = schedule_id_for(prefix, row["name"])
        if schedule_id in existing:
            outcomes.append(
                Outcome(row["name"], schedule_id, "exists", "a schedule with this id exists already")
            )
            continue
        try:
            fields, notes = fields_for(row, mapping)
            values = rows._columns(dict(fields))  # the API's own check, so a dry run refuses alike
            values.setdefault("kind", "cron")
            rows.check(schedule_id, values)
            if schedule_id in rows.declared_ids():
                raise NotMapped(f"id {schedule_id!r} is a periodic job declared in code")
        except NotMapped as exc:
            outcomes.append(Outcome(row["name"], schedule_id, "skipped", str(exc)))
            continue
        except rows.ScheduleInvalid as exc:
            outcomes.append(Outcome(row["name"], schedule_id, "skipped", str(exc)))
            continue
        if not dry_run:
            activity = fields.pop("activity")
            rows.create(
                schedule_id,
                activity=activity,
                actor=actor,
                reason=f"imported from django-celery-beat task {row['name']!r}",
                **fields,
            )
            fields["activity"] = activity
        outcomes.append(
            Outcome(row["name"], schedule_id, "would_create" if dry_run else "created", "", notes, fields)
        )
    return outcomes


__all__ = ["NotMapped", "Outcome", "import_beat", "schedule_id_for"]
