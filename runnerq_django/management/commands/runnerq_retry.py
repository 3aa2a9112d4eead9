"""``manage.py runnerq_retry``: run failed, cancelled or dead-lettered activities again."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import commands, reads

RETRYABLE = ("failed", "dead_letter", "cancelled")


class Command(OperatorCommand):
    help = (
        "Retry failed or cancelled activities (event Retried) and redrive dead letters (event Redriven), "
        "keeping their checkpoints. Name the activities by id, or select them with --status "
        "(oldest first, at most --limit). Each run is one command in the runnerq_commands ledger: "
        "rerunning with the same --command-id replays its outcome instead of acting twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_ids(parser, "retry", required=False)  # or --status
        parser.add_argument(
            "--status",
            action="append",
            choices=RETRYABLE,
            help="Select activities in this status (repeatable), e.g. --status dead_letter to redrive.",
        )
        parser.add_argument("--type", dest="activity_type", help="With --status: only this activity type.")
        parser.add_argument(
            "--limit", type=int, default=100, help="With --status: at most this many (1..1000, default 100)."
        )
        parser.add_argument(
            "--reset-attempts", action="store_true", help="Give back the whole attempt budget."
        )
        self.add_common(parser, ledger=True)

    def handle(self, *args: Any, **options: Any) -> None:
        queue = self.queue(options)
        alias = self.alias(options, queue)
        ids = self.ids(options, options["ids"])
        statuses = options.get("status") or []
        if ids and statuses:
            self.fail(options, "give activity ids or --status, not both", field="status")
        if not ids and not statuses:
            self.fail(
                options,
                "nothing to retry: give activity ids, or --status failed|dead_letter|cancelled",
                field="ids",
            )
        if not 1 <= options["limit"] <= commands.MAX_IDS:
            self.fail(
                options, f"--limit must be 1..{commands.MAX_IDS}, got {options['limit']}", field="limit"
            )
        if statuses:
            ids = self.select(alias, queue, statuses, options.get("activity_type"), options["limit"])
            if not ids:
                self.emit(
                    options,
                    {"queue": queue, "matched": 0, "applied": 0, "more": False, "results": []},
                    [f"Retry on queue {queue}: no {' or '.join(statuses)} activities to retry."],
                )
                return
        self.run_command(
            options,
            "Retry",
            queue,
            ids,
            lambda command_id, reason: commands.retry(
                queue,
                ids,
                reset_attempts=options["reset_attempts"],
                command_id=command_id,
                reason=reason,
                dry_run=options["dry_run"],
                using=alias,
            ),
        )

    @staticmethod
    def select(
        alias: str, queue: str, statuses: list[str], activity_type: str | None, limit: int
    ) -> list[uuid.UUID]:
        return reads.finished_to_retry(alias, queue, statuses, activity_type, limit)
