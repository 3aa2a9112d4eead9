"""``manage.py runnerq_reap``: take back activities whose worker's lease expired."""

from __future__ import annotations

import functools
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django import conf
from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import reads


class Command(OperatorCommand):
    help = (
        "Run the reaper now: every running activity whose lease expired (its worker died or hung) is "
        "requeued with the attempt counted (event Requeued), or dead-lettered on its last attempt "
        "(event DeadLetter, reason lease_expired). Workers do this on their own every "
        "RUNNERQ['REAPER_INTERVAL_SECONDS']; this is for when none is running."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit",
            type=int,
            default=None,
            help=f"Leases per statement, 1..1000 (default RUNNERQ['REAPER_BATCH'] = {conf.get('REAPER_BATCH')}).",
        )
        self.add_common(parser, many_queues=True, batches=True)

    def handle(self, *args: Any, **options: Any) -> None:
        from runnerq_django import storage

        limit = options["limit"] if options["limit"] is not None else int(conf.get("REAPER_BATCH"))
        if not 1 <= limit <= 1000:
            self.fail(options, f"--limit must be 1..1000, got {limit}", field="limit")
        queues = self.queues(options)
        per_queue: dict[str, dict[str, int]] = {}
        report: dict[str, Any] = {"dry_run": options["dry_run"], "queues": per_queue}
        lines: list[str] = []
        for queue in queues:
            alias = self.alias(options, queue)  # each queue on its own database
            if options["dry_run"]:
                expired = self.expired(alias, queue)
                per_queue[queue] = {"expired": expired}
                lines.append(f"{queue}: {expired} expired lease(s) would be reaped; nothing changed.")
                continue
            total, batches = self.run_batches(
                options, functools.partial(storage.reap, queue, limit, using=alias), limit
            )
            per_queue[queue] = {"reaped": total, "batches": batches}
            lines.append(f"{queue}: reaped {total} expired lease(s).")
        self.emit(options, report, lines)

    @staticmethod
    def expired(alias: str, queue: str) -> int:
        return reads.expired_leases(alias, queue)
