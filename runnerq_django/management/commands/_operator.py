"""What the operator commands (runnerq_retry, runnerq_cancel, runnerq_enqueue, runnerq_cleanup,
runnerq_reap) share: common options, human or ``--json`` output, and errors that name the input
at fault. (A leading underscore keeps Django from listing this module as a command.)"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from runnerq_django import conf
from runnerq_django.storage import validation
from runnerq_django.storage.commands import CommandResult
from runnerq_django.storage.errors import StorageError


class OperatorCommand(BaseCommand):
    # Operators reach for these when something is wrong; other checks failing must not block them.
    requires_system_checks: list[str] = []

    def add_common(self, parser, *, many_queues: bool = False, dry_run: bool = True) -> None:
        if many_queues:
            parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                                help="Queue to act on; repeat for several (default: every queue in RUNNERQ['QUEUES']).")
        else:
            parser.add_argument("--queue", default=None,
                                help="Queue of the activities (default: RUNNERQ['DEFAULT_QUEUE']).")
        if dry_run:
            parser.add_argument("--dry-run", action="store_true", help="Report what would happen; change nothing.")
        parser.add_argument("--json", action="store_true", help="Print the outcome as one JSON object on stdout.")
        parser.add_argument("--database", default=None, help="Database alias (default: RUNNERQ['DATABASE']).")

    # -- inputs ---------------------------------------------------------------------------------

    def queue(self, options) -> str:
        return self.checked(options, lambda: validation.queue_name(options.get("queue") or conf.get("DEFAULT_QUEUE")))

    def queues(self, options) -> list[str]:
        names = options.get("queues") or list(conf.get("QUEUES") or [conf.get("DEFAULT_QUEUE")])
        return [self.checked(options, lambda n=n: validation.queue_name(n)) for n in dict.fromkeys(names)]

    def ids(self, options, raw: list[str]) -> list[uuid.UUID]:
        out = []
        for value in raw:
            try:
                out.append(uuid.UUID(value))
            except ValueError:
                self.fail(options, f"not an activity id (a UUID): {value!r}", code="invalid_argument", field="ids")
        return out

    def alias(self, options) -> str:
        from django.db import connections

        alias = options.get("database") or conf.database_alias()
        if alias not in connections:
            self.fail(options, f"unknown database alias {alias!r}", code="invalid_argument", field="database")
        return alias

    def checked(self, options, thunk):
        """Run ``thunk``; a storage or database error becomes a clean CommandError."""
        try:
            return thunk()
        except StorageError as exc:
            self.fail(options, exc.message, code=exc.kind.wire_name, field=exc.field)
        except DatabaseError as exc:
            self.fail(options, f"database error: {exc}".strip(), code="unavailable")

    # -- output ---------------------------------------------------------------------------------

    def fail(self, options, message: str, *, code: str = "invalid_argument", field: str | None = None):
        if options.get("json"):
            error: dict[str, Any] = {"code": code, "message": message}
            if field:
                error["field"] = field
            self.stdout.write(json.dumps({"error": error}))
        raise CommandError(message)

    def emit(self, options, document: dict[str, Any], lines: list[str]) -> None:
        if options.get("json"):
            self.stdout.write(json.dumps(document, default=str, sort_keys=False))
        else:
            for line in lines:
                self.stdout.write(line)

    def command_lines(self, verb: str, queue: str, result: CommandResult, *, dry_run: bool) -> list[str]:
        would = sum(1 for item in result.results if item.outcome == "would_apply")
        head = (f"{verb} on queue {queue}: {would} would be applied" if dry_run
                else f"{verb} on queue {queue}: applied {result.applied}")
        if result.cascaded:
            head += f" (+{result.cascaded} descendant{'s' if result.cascaded != 1 else ''}{' would be' if dry_run else ''} cancelled too)"
        skipped = result.skipped
        head += f", skipped {len(skipped)}"
        if result.replayed:
            head += " (replayed: this command id had already run; nothing was done twice)"
        lines = [self.style.SUCCESS(head) if result.applied or dry_run else head]
        for item in result.results:
            if item.outcome == "skipped":
                lines.append(f"  skipped {item.id}: {item.error.message if item.error else 'skipped'}")
            elif dry_run:
                lines.append(f"  would apply {item.id}")
        return lines
