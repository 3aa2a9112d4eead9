"""``manage.py runnerq_pause``: pause a queue, or one activity type in it, across every
runnerq-django worker; ``--list`` shows what is paused. ``runnerq_resume`` undoes it."""

from __future__ import annotations

import functools
import getpass
import socket
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.commands._operator import OperatorCommand


class FlowCommand(OperatorCommand):
    """What runnerq_pause and runnerq_resume share: the target and who is acting."""

    action = "pause"

    def add_target(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--type",
            dest="activity_type",
            default=None,
            metavar="TYPE",
            help="Only this activity type in the queue (default: the whole queue).",
        )
        parser.add_argument("--reason", default="", help="Why (shown in the admin and runnerq_status).")
        parser.add_argument(
            "--by",
            default=None,
            help="Who is acting, for the flow ledger (default: 'command <OS user>@<host>').",
        )
        self.add_common(parser, dry_run=False)

    def actor(self, options: dict[str, Any]) -> str:
        if options.get("by"):
            return str(options["by"])
        try:
            user = getpass.getuser()
        except Exception:  # no user name in this environment
            user = "unknown"
        return f"command {user}@{socket.gethostname()}"

    def act(self, options: dict[str, Any]) -> None:
        from runnerq_django.storage import flow, validation

        queue = self.queue(options)
        alias = self.alias(options, queue)
        kind = options.get("activity_type")
        if kind is not None:
            self.checked(options, lambda: validation.text("type", kind, validation.MAX_TYPE_BYTES))
        operation = flow.pause if self.action == "pause" else flow.resume
        changed = self.checked(
            options,
            lambda: operation(queue, kind, actor=self.actor(options), reason=options["reason"], using=alias),
        )
        what = f"type {kind} in queue {queue}" if kind else f"queue {queue}"
        if self.action == "pause":
            line = f"paused {what}" if changed else f"{what} was already paused (who and why updated)"
        else:
            line = f"resumed {what}" if changed else f"{what} was not paused; nothing changed"
        document = {"action": self.action, "queue": queue, "activity_type": kind, "changed": changed}
        self.emit(options, document, [self.style.SUCCESS(line) if changed else line])


class Command(FlowCommand):
    help = (
        "Pause a queue, or one activity type in it (--type), across every runnerq-django worker: "
        "their claims skip it from their next poll on, running attempts finish, and its activities "
        "stay pending until runnerq_resume. Recorded with --by and --reason in the flow ledger. "
        "Go and TypeScript workers do not honour pauses. --list shows every pause in effect."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--list", action="store_true", help="Show what is paused; change nothing.")
        self.add_target(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["list"]:
            self.act(options)
            return
        from runnerq_django.storage import flow

        pauses = [
            (alias, pause)
            for alias in self.aliases(options)
            for pause in self.checked(
                options, functools.partial(flow.pauses, using=self.alias(options | {"database": alias}))
            )
        ]
        several = len({alias for alias, _ in pauses}) > 1
        document = {
            "paused": [
                {
                    "database": alias,
                    "queue": p.queue_name,
                    "activity_type": p.activity_type or None,
                    "paused_by": p.paused_by,
                    "reason": p.reason,
                    "paused_at": p.paused_at.isoformat(),
                }
                for alias, p in pauses
            ]
        }
        lines = [
            f"{alias + ': ' if several else ''}"
            f"{p.queue_name}{'/' + p.activity_type if p.activity_type else ' (whole queue)'}: paused by "
            f"{p.paused_by} at {p.paused_at:%Y-%m-%d %H:%M:%S %Z}{': ' + p.reason if p.reason else ''}"
            for alias, p in pauses
        ] or ["nothing is paused"]
        self.emit(options, document, lines)
