"""``manage.py runnerq_cleanup``: delete finished trees past their retention window."""

from __future__ import annotations

import functools
import time
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django import conf
from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import commands, reads

MAX_LEDGER_DAYS = 3650  # ten years, the bound of every retention window

# The retention windows' options: (flag, key in RUNNERQ['RETENTION'], help before the default).
WINDOWS = (
    ("--completed-seconds", "COMPLETED_SECONDS", "Window of completed trees (0 = keep"),
    ("--failed-seconds", "FAILED_SECONDS", "Window of failed, dead-lettered and cancelled trees (0 = keep"),
    ("--events-seconds", "EVENTS_SECONDS", "Trim events of finished activities older than this (0 = off"),
)


class Command(OperatorCommand):
    help = (
        "Apply retention now: delete finished trees whose root finished longer ago than its window "
        "(completed / failed, dead-lettered and cancelled), with their inputs, results, events, "
        "dependencies and keys; trim old events of finished activities; prune the command ledger. "
        "Windows default to RUNNERQ['RETENTION']. Runs batches until nothing is left."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        retention = conf.get("RETENTION")
        for flag, key, what in WINDOWS:
            parser.add_argument(flag, type=int, default=None, help=f"{what}; default {retention[key]}).")
        parser.add_argument(
            "--batch",
            type=int,
            default=None,
            help=f"Roots per statement, 1..1000 (default {retention['BATCH']}).",
        )
        parser.add_argument(
            "--ledger-days",
            type=int,
            default=7,
            help="Prune runnerq_commands rows older than this many days (>= 1; default 7).",
        )
        self.add_common(parser, many_queues=True, batches=True)

    def handle(self, *args: Any, **options: Any) -> None:
        from runnerq_django import storage

        retention = conf.get("RETENTION")
        windows: dict[str, int] = {
            "completed_s": _pick(options["completed_seconds"], retention["COMPLETED_SECONDS"]),
            "failed_s": _pick(options["failed_seconds"], retention["FAILED_SECONDS"]),
            "events_s": _pick(options["events_seconds"], retention["EVENTS_SECONDS"]),
        }
        batch = _pick(options["batch"], retention["BATCH"])
        for name, value in {**windows, "batch": batch}.items():
            if value < 0:
                self.fail(
                    options,
                    f"--{name.replace('_s', '-seconds').replace('_', '-')} must be >= 0, got {value}",
                    field=name,
                )
        if not 1 <= batch <= 1000:
            self.fail(options, f"--batch must be 1..1000, got {batch}", field="batch")
        if not 1 <= options["ledger_days"] <= MAX_LEDGER_DAYS:
            self.fail(
                options,
                f"--ledger-days must be 1..{MAX_LEDGER_DAYS} (replays are promised for 24 hours), "
                f"got {options['ledger_days']}",
                field="ledger_days",
            )
        queues = self.queues(options)
        per_queue: dict[str, dict[str, float]] = {}
        report: dict[str, Any] = {
            "dry_run": options["dry_run"],
            **windows,
            "batch": batch,
            "queues": per_queue,
        }
        lines: list[str] = []
        for queue in queues:
            alias = self.alias(options, queue)  # each queue on its own database
            if options["dry_run"]:
                eligible = self.eligible(alias, queue, windows)
                per_queue[queue] = {"eligible_roots": eligible}
                lines.append(
                    f"{queue}: up to {eligible} finished root(s) are past their window "
                    "(roots with unfinished descendants or live waiters elsewhere are kept); nothing deleted."
                )
                continue
            started = time.monotonic()
            deleted, batches = self.run_batches(
                options,
                functools.partial(storage.cleanup, queue, batch=batch, using=alias, **windows),
                batch,
                None if options["json"] else functools.partial(self._progress, queue),
            )
            per_queue[queue] = {
                "deleted_roots": deleted,
                "batches": batches,
                "seconds": round(time.monotonic() - started, 3),
            }
            lines.append(f"{queue}: deleted {deleted} finished tree(s) in {batches} batch(es).")
        if options["dry_run"]:
            report["ledger_pruned"] = 0
        else:
            prune = functools.partial(
                commands.prune_ledger, older_than_seconds=options["ledger_days"] * 86400
            )
            # The ledger of each database the queues live on.
            report["ledger_pruned"] = sum(
                self.checked(options, functools.partial(prune, using=alias))
                for alias in dict.fromkeys(self.alias(options, queue) for queue in queues)
            )
            lines.append(
                f"command ledger: pruned {report['ledger_pruned']} row(s) older than {options['ledger_days']} day(s)."
            )
        self.emit(options, report, lines)

    def _progress(self, queue: str, deleted: int) -> None:
        self.stdout.write(f"{queue}: {deleted} trees deleted so far …")

    @staticmethod
    def eligible(alias: str, queue: str, windows: dict[str, int]) -> int:
        """Finished roots past their window, from idx_runnerq_root_terminal (statuses as literals)."""
        return reads.roots_past_window(alias, queue, windows)


def _pick(value: int | None, default: int) -> int:
    return default if value is None else value
