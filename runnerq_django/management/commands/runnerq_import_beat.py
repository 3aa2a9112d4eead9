"""``manage.py runnerq_import_beat``: django-celery-beat's periodic tasks as runtime schedules."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from runnerq_django import conf
from runnerq_django.management.base import RunnerQCommand
from runnerq_django.management.preflight import one_line_errors, require_database


class Command(RunnerQCommand):
    help = (
        "Create a runtime schedule for each of django-celery-beat's periodic tasks that can be mapped (its tables "
        "are read with SQL: the package need not be installed here), and report each one that cannot, with why. "
        "A task already imported is left alone."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            metavar="TASK=TYPE",
            help="The activity type of a Celery task name (repeatable); by default a registered @activity of "
            "the same name or dotted path.",
        )
        parser.add_argument(
            "--prefix", default="celery.", help="Prefix of the schedules' ids (default 'celery.')."
        )
        parser.add_argument(
            "--database", help="The alias holding django-celery-beat's tables (default RUNNERQ['DATABASE'])."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would be created; create nothing."
        )
        parser.add_argument(
            "--by", help="Who is acting, for the schedules' history (default 'command <OS user>@<host>')."
        )
        parser.add_argument("--json", action="store_true", help="One JSON object per task.")

    @one_line_errors
    def handle(self, *args: Any, **opts: Any) -> None:
        from django.db import DatabaseError

        from runnerq_django.scheduler.beat_import import import_beat

        alias = opts["database"] or conf.database_alias()
        require_database(conf.database_alias())
        mapping: dict[str, str] = {}
        for item in opts["map"]:
            task, sep, activity = item.partition("=")
            if not sep or not task or not activity:
                raise CommandError(f"--map must be TASK=TYPE, got {item!r}")
            mapping[task] = activity
        try:
            outcomes = import_beat(
                using=alias, mapping=mapping, prefix=opts["prefix"], dry_run=opts["dry_run"], actor=opts["by"]
            )
        except DatabaseError as exc:
            raise CommandError(
                f"could not read django-celery-beat's tables on {alias!r}: {exc}".strip()
            ) from None
        for outcome in outcomes:
            if opts["json"]:
                self.stdout.write(json.dumps(outcome.as_dict()))
                continue
            line = f"{outcome.status:12} {outcome.name} -> {outcome.schedule_id}"
            if outcome.reason:
                line += f": {outcome.reason}"
            for note in outcome.notes:
                line += f" (note: {note})"
            self.stdout.write(line)
        if not opts["json"]:
            counts: dict[str, int] = {}
            for outcome in outcomes:
                counts[outcome.status] = counts.get(outcome.status, 0) + 1
            summary = (
                ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
                or "no tasks"
            )
            self.stdout.write(f"{len(outcomes)} periodic task(s): {summary}.")
