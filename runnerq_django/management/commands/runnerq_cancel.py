"""``manage.py runnerq_cancel``: cancel activities (and their unfinished children)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import commands


class Command(OperatorCommand):
    help = (
        "Cancel unfinished activities (event Cancelled). By default their unfinished descendants are "
        "cancelled too; a running attempt loses its claim (its result is refused) and whoever awaits "
        "a cancelled activity gets a cancellation error. Rerunning with the same --command-id replays "
        "the recorded outcome."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_ids(parser, "cancel", required=True)
        parser.add_argument("--no-cascade", action="store_true", help="Leave the activities' children alone.")
        self.add_common(parser, ledger=True)

    def handle(self, *args: Any, **options: Any) -> None:
        queue = self.queue(options)
        alias = self.alias(options, queue)
        ids = self.ids(options, options["ids"])
        self.run_command(
            options,
            "Cancel",
            queue,
            ids,
            lambda command_id, reason: commands.cancel(
                queue,
                ids,
                cascade=not options["no_cascade"],
                command_id=command_id,
                reason=reason,
                dry_run=options["dry_run"],
                using=alias,
            ),
        )
