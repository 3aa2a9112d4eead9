"""``manage.py runnerq_resume``: resume a queue or type that ``runnerq_pause`` paused."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.commands.runnerq_pause import FlowCommand


class Command(FlowCommand):
    help = (
        "Resume a queue, or one activity type in it (--type), that runnerq_pause paused, and wake "
        "the queue's workers. Resuming a queue leaves its separately paused types paused. Recorded "
        "with --by and --reason in the flow ledger."
    )
    action = "resume"

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_target(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.act(options)
