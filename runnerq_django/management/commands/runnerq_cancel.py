"""``manage.py runnerq_cancel``: cancel activities (and their unfinished children)."""

from __future__ import annotations

import uuid

from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import commands


class Command(OperatorCommand):
    help = (
        "Cancel unfinished activities (event Cancelled). By default their unfinished descendants are "
        "cancelled too; a running attempt loses its claim (its result is refused) and whoever awaits "
        "a cancelled activity gets a cancellation error. Rerunning with the same --command-id replays "
        "the recorded outcome."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("ids", nargs="+", metavar="ID", help="Activity ids to cancel.")
        parser.add_argument("--no-cascade", action="store_true", help="Leave the activities' children alone.")
        parser.add_argument("--reason", help="Recorded in each activity's history.")
        parser.add_argument(
            "--command-id", default=None, help="Idempotency id of this command (default: a new one)."
        )
        self.add_common(parser)

    def handle(self, *args, **options) -> None:
        queue = self.queue(options)
        alias = self.alias(options)
        ids = self.ids(options, options["ids"])
        command_id = options.get("command_id") or f"cli:{uuid.uuid4()}"
        result = self.checked(
            options,
            lambda: commands.cancel(
                queue,
                ids,
                cascade=not options["no_cascade"],
                command_id=command_id,
                reason=options.get("reason"),
                dry_run=options["dry_run"],
                using=alias,
            ),
        )
        self.emit_result(
            options,
            queue,
            ids,
            result,
            {"queue": queue, "command_id": command_id, "dry_run": options["dry_run"], **result.to_dict()},
            self.command_lines("Cancel", queue, result, dry_run=options["dry_run"]),
        )
