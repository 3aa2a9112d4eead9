"""The verbs of ``manage.py runnerq_schedule`` on runtime schedules: ``list``, ``get``,
``create``, ``update``, ``pause``, ``resume``, ``delete``, ``run``, ``history`` (``--json`` for
one JSON object per line). Each calls the API (``runnerq_django.scheduler.runtime_schedules``), so the command
refuses what the API refuses, with the same message, and records the change under ``--by``
(default ``command <user>@<host>``).

Internal: not part of the public API.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError

from runnerq_django.scheduler import rows
from runnerq_django.scheduler.schedules import format_instant

VERBS = ("list", "get", "create", "update", "pause", "resume", "delete", "run", "history")
# --option -> API argument, for the fields create and update take.
FIELD_OPTIONS: dict[str, tuple[type, str]] = {
    "activity": (str, "create/update: the activity type each occurrence enqueues."),
    "cron": (str, "create/update: a cron expression (croniter syntax), evaluated in --tz."),
    "tz": (str, "create/update: the cron's IANA time zone (default UTC)."),
    "every": (int, "create/update: an interval, in whole seconds (at least 1)."),
    "anchor": (
        str,
        "create/update: the interval's anchor, an ISO 8601 instant with an offset (default the epoch).",
    ),
    "at": (str, "create/update: a one-off's instant, ISO 8601 with an offset."),
    "start": (str, "create/update: no occurrence before this instant."),
    "end": (str, "create/update: no occurrence after this instant."),
    "queue": (str, "create/update: the queue (default the handler's, else DEFAULT_QUEUE)."),
    "priority": (int, "create/update: 1..4 (default the handler's)."),
    "misfire_grace": (
        int,
        "create/update: seconds after which a missed occurrence is skipped (default 3600).",
    ),
    "max_catch_up": (
        int,
        "create/update: with --no-coalesce, missed occurrences enqueued per tick (default 10).",
    ),
    "jitter": (
        int,
        "create/update: each occurrence runs up to this many seconds late, 0..86400 (default 0).",
    ),
    "max_occurrences": (int, "create/update: stop after this many enqueued occurrences."),
    "description": (str, "create/update: free text shown in the admin."),
}
FLAG_HELP = {
    "coalesce": "of several missed occurrences, enqueue only the latest (default on)",
    "catch_up_after_repair": "a schedule without progress may enqueue its latest occurrence inside the grace (default on)",
    "enabled": "run it (--no-enabled: create it paused)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "verb",
        nargs="?",
        choices=VERBS,
        help="What to do with runtime schedules (none: show every job's state).",
    )
    parser.add_argument(
        "schedule_id",
        nargs="?",
        help="The schedule's id (get, create, update, pause, resume, delete, run, history).",
    )
    for name, (kind, text) in FIELD_OPTIONS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", dest=f"field_{name}", type=kind, default=None, help=text
        )
    parser.add_argument(
        "--payload",
        dest="field_payload",
        default=None,
        help="create/update: the payload of every occurrence, as JSON.",
    )
    for flag, text in FLAG_HELP.items():
        group = parser.add_mutually_exclusive_group()
        dashed = flag.replace("_", "-")
        group.add_argument(
            f"--{dashed}",
            dest=f"field_{flag}",
            action="store_true",
            default=None,
            help=f"create/update: {text}.",
        )
        group.add_argument(
            f"--no-{dashed}", dest=f"field_{flag}", action="store_false", help=f"The opposite of --{dashed}."
        )
    parser.add_argument("--by", help="Who is acting, for the history (default: 'command <OS user>@<host>').")
    parser.add_argument("--reason", default="", help="Why, for the history.")
    parser.add_argument(
        "--expected-revision", type=int, help="update: refuse if the schedule changed meanwhile."
    )


def _fields(options: dict[str, Any]) -> dict[str, Any]:
    fields = {
        key.removeprefix("field_"): value
        for key, value in options.items()
        if key.startswith("field_") and value is not None
    }
    if "payload" in fields:
        try:
            fields["payload"] = json.loads(fields["payload"])
        except ValueError as exc:
            raise CommandError(f"--payload: not JSON: {exc}") from None
    return fields


def as_dict(row: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"id": row.pk}
    for name in (
        *rows.EDITABLE,
        "revision",
        "occurrence_count",
        "timing_changed_at",
        "created_at",
        "updated_at",
        "created_by",
        "updated_by",
    ):
        value = getattr(row, name)
        data[name] = format_instant(value) if isinstance(value, datetime) else value
    try:
        job = rows.job_of(row)
        data["schedule"] = job.schedule.describe()
        upcoming = (
            job.schedule.next_after(datetime.now().astimezone()) if row.enabled and not job.finished else None
        )
        data["next"] = format_instant(upcoming)
    except Exception as exc:  # a row written by hand that no longer validates
        data["schedule"], data["next"] = f"invalid: {exc}", None
    return data


def run(verb: str, options: dict[str, Any], write: Any) -> None:
    """Run ``verb``; ``write(text)`` prints one line."""
    schedule_id = options.get("schedule_id")
    as_json = options.get("json", False)
    actor = options.get("by") or None
    reason = options.get("reason") or ""

    def show(row: Any) -> None:
        data = as_dict(row)
        if as_json:
            write(json.dumps(data))
        else:
            state = "enabled" if row.enabled else "paused"
            write(
                f"{row.pk}  rev {row.revision}  {state}  {data['schedule']}  next {data['next'] or '-'}  -> {row.activity}"
            )

    if verb == "list":
        for row in rows.list_schedules():
            show(row)
        return
    if not schedule_id:
        raise CommandError(f"{verb}: give the schedule's id")
    try:
        if verb == "get":
            show(rows.get(schedule_id))
        elif verb == "create":
            fields = _fields(options)
            activity = fields.pop("activity", None)
            if not activity:
                raise CommandError(
                    "create: --activity is required (the activity type each occurrence enqueues)"
                )
            show(rows.create(schedule_id, activity=activity, actor=actor, reason=reason, **fields))
        elif verb == "update":
            show(
                rows.update(
                    schedule_id,
                    actor=actor,
                    reason=reason,
                    expected_revision=options.get("expected_revision"),
                    **_fields(options),
                )
            )
        elif verb in ("pause", "resume"):
            show((rows.pause if verb == "pause" else rows.resume)(schedule_id, actor=actor, reason=reason))
        elif verb == "delete":
            deleted = rows.delete(schedule_id, actor=actor, reason=reason)
            write(
                json.dumps({"id": schedule_id, "deleted": deleted})
                if as_json
                else f"{schedule_id}: {'deleted' if deleted else 'no such schedule'}"
            )
        elif verb == "run":
            activity_id, created = rows.run_now(schedule_id, actor=actor, reason=reason)
            write(
                json.dumps({"id": schedule_id, "activity_id": str(activity_id), "created": created})
                if as_json
                else f"{schedule_id}: enqueued activity {activity_id}"
            )
        elif verb == "history":
            for change in rows.history(schedule_id):
                entry = {
                    "at": format_instant(change.at),
                    "action": change.action,
                    "actor": change.actor,
                    "revision": change.revision,
                    "reason": change.reason,
                    "changes": change.changes,
                    "activity_id": str(change.activity_id) if change.activity_id else None,
                }
                write(
                    json.dumps(entry)
                    if as_json
                    else f"{entry['at']}  {change.action}  rev {change.revision}  by {change.actor}  {json.dumps(change.changes)}"
                )
    except rows.ScheduleNotFound as exc:
        raise CommandError(str(exc)) from None
    except rows.ScheduleInvalid as exc:
        raise CommandError(str(exc)) from None
    except rows.RevisionConflict as exc:
        raise CommandError(str(exc)) from None
    except TypeError as exc:
        raise CommandError(str(exc)) from None


__all__ = ["VERBS", "add_arguments", "as_dict", "run"]
