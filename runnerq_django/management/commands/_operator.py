"""What the operator commands (runnerq_retry, runnerq_cancel, runnerq_enqueue, runnerq_cleanup,
runnerq_reap) share: common options, human or ``--json`` output, and errors that name the input
at fault. (A leading underscore keeps Django from listing this module as a command.)"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from runnerq_django import conf, routing
from runnerq_django.management import preflight
from runnerq_django.management.base import Options, RunnerQCommand
from runnerq_django.storage import validation
from runnerq_django.storage.commands import CommandResult
from runnerq_django.storage.errors import SchemaMissing, StorageError
from runnerq_django.worker.exit_status import EX_CONFIG, EX_UNAVAILABLE

T = TypeVar("T")


class JsonErrorsParser(CommandParser):
    """With ``--json`` on the command line, a command line argparse refuses (a bad ``--status``
    choice, a non-integer ``--limit``, a missing id) is reported like every other error: one
    ``{"error": {...}}`` document on stdout, the message on stderr, exit status 2 (argparse's)."""

    def parse_args(  # type: ignore[override]  # the stubs' overloads; this passes both through
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        self._raw_args = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if "--json" not in getattr(self, "_raw_args", ()):
            super().error(message)
        error: dict[str, Any] = {"code": "invalid_argument", "message": message}
        if field := self._field_of(message):
            error["field"] = field
        sys.stdout.write(json.dumps({"error": error}) + "\n")
        sys.stdout.flush()
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message}\n")
        raise CommandError(f"Error: {message}")

    def _field_of(self, message: str) -> str | None:
        """The option an argparse message is about (``argument --limit: invalid int value`` ->
        ``limit``; ``the following arguments are required: ID`` -> ``ids``)."""
        found = re.match(r"argument ([^:]+):", message) or re.match(
            r"the following arguments are required: ([^,]+)", message
        )
        if not found:
            return None
        names = set(found.group(1).split("/"))
        for action in self._actions:
            if names & {*action.option_strings, action.metavar, action.dest}:
                return action.dest
        return None


class OperatorCommand(RunnerQCommand):
    # Operators reach for these when something is wrong; other checks failing must not block them.
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = JsonErrorsParser  # same parser, errors also as JSON under --json
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        """The database answers and has the tables, or one line saying what to do: status 78,
        or 69 for a server that does not answer (an operator command does not wait for it)."""
        from django.db import connections

        for alias in self.aliases(options):
            if alias in connections:  # an unknown alias is reported by alias()
                try:
                    preflight.require_database(alias)
                except preflight.DatabaseNotAnswering as exc:
                    self.fail(options, str(exc), code="unavailable", returncode=EX_UNAVAILABLE)
                except (preflight.DatabaseUnreachable, SchemaMissing) as exc:
                    code = "configuration" if isinstance(exc, SchemaMissing) else "unavailable"
                    self.fail(options, str(exc), code=code, returncode=EX_CONFIG)
        return super().execute(*args, **options)

    @staticmethod
    def aliases(options: Options) -> list[str]:
        """The databases a command may touch: ``--database``, else those of its ``--queue``(s),
        else every one that hosts a queue (``RUNNERQ['QUEUE_DATABASES']``)."""
        if options.get("database"):
            return [options["database"]]
        named = options.get("queues") or ([options["queue"]] if options.get("queue") else None)
        if named:
            return routing.databases(named)
        return routing.databases()

    def add_ids(self, parser: CommandParser, verb: str, *, required: bool) -> None:
        parser.add_argument(
            "ids", nargs="+" if required else "*", metavar="ID", help=f"Activity ids to {verb}."
        )

    def add_common(
        self,
        parser: CommandParser,
        *,
        many_queues: bool = False,
        dry_run: bool = True,
        ledger: bool = False,
        batches: bool = False,
    ) -> None:
        """The options the operator commands share; ``ledger``: --reason and --command-id of a
        command recorded in runnerq_commands; ``batches``: --max-batches of a batched sweep."""
        if ledger:
            parser.add_argument("--reason", help="Recorded in each activity's history.")
            parser.add_argument(
                "--command-id", default=None, help="Idempotency id of this command (default: a new one)."
            )
        if batches:
            parser.add_argument(
                "--max-batches",
                type=int,
                default=0,
                help="Stop after this many batches per queue (0 = until done).",
            )
        if many_queues:
            parser.add_argument(
                "--queue",
                action="append",
                dest="queues",
                metavar="QUEUE",
                help="Queue to act on; repeat for several (default: every queue in RUNNERQ['QUEUES']).",
            )
        else:
            parser.add_argument(
                "--queue", default=None, help="Queue of the activities (default: RUNNERQ['DEFAULT_QUEUE'])."
            )
        if dry_run:
            parser.add_argument(
                "--dry-run", action="store_true", help="Report what would happen; change nothing."
            )
        parser.add_argument(
            "--json", action="store_true", help="Print the outcome as one JSON object on stdout."
        )
        parser.add_argument(
            "--database",
            default=None,
            help="Database alias (default: each queue's, RUNNERQ['QUEUE_DATABASES'], else RUNNERQ['DATABASE']).",
        )

    # -- inputs ---------------------------------------------------------------------------------

    def queue(self, options: Options) -> str:
        return self.checked(
            options, lambda: validation.queue_name(options.get("queue") or conf.get("DEFAULT_QUEUE"))
        )

    def queues(self, options: Options) -> list[str]:
        names = options.get("queues") or list(conf.get("QUEUES") or [conf.get("DEFAULT_QUEUE")])
        return [
            self.checked(options, functools.partial(validation.queue_name, n)) for n in dict.fromkeys(names)
        ]

    def ids(self, options: Options, raw: list[str]) -> list[uuid.UUID]:
        out: list[uuid.UUID] = []
        for value in raw:
            try:
                out.append(uuid.UUID(value))
            except ValueError:
                self.fail(
                    options, f"not an activity id (a UUID): {value!r}", code="invalid_argument", field="ids"
                )
        return out

    def alias(self, options: Options, queue: str | None = None) -> str:
        """``--database``, else the database ``queue`` lives on (``routing.database_for``), else
        RUNNERQ['DATABASE']."""
        from django.db import connections

        given = options.get("database")
        alias: str = given or (routing.database_for(queue) if queue is not None else conf.database_alias())
        if alias not in connections:
            self.fail(options, f"unknown database alias {alias!r}", code="invalid_argument", field="database")
        return alias

    def checked(self, options: Options, thunk: Callable[[], T]) -> T:
        """Run ``thunk``; a storage or database error becomes a clean CommandError."""
        try:
            return thunk()
        except StorageError as exc:
            self.fail(options, exc.message, code=exc.kind.wire_name, field=exc.field)
        except DatabaseError as exc:
            self.fail(options, f"database error: {exc}".strip(), code="unavailable")

    def run_command(
        self,
        options: Options,
        verb: str,
        queue: str,
        ids: list[uuid.UUID],
        apply: Callable[[str, str | None], CommandResult],
    ) -> None:
        """Run one ledger command, ``apply(command_id, reason)``, and print its outcome."""
        command_id = options.get("command_id") or f"cli:{uuid.uuid4()}"
        result = self.checked(options, lambda: apply(command_id, options.get("reason")))
        self.emit_result(
            options,
            queue,
            ids,
            result,
            {"queue": queue, "command_id": command_id, "dry_run": options["dry_run"], **result.to_dict()},
            self.command_lines(verb, queue, result, dry_run=options["dry_run"]),
        )

    def run_batches(
        self,
        options: Options,
        step: Callable[[], int],
        batch: int,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Run ``step`` (one statement acting on at most ``batch`` rows) until a batch comes back
        short or ``--max-batches`` is reached; ``progress(total)`` after each full batch.
        Returns (rows acted on, batches run)."""
        total, batches = 0, 0
        while True:
            n = self.checked(options, step)
            total += n
            batches += 1
            if progress is not None and n == batch:
                progress(total)
            if n < batch or (options["max_batches"] and batches >= options["max_batches"]):
                return total, batches

    def emit_result(
        self,
        options: Options,
        queue: str,
        ids: list[uuid.UUID],
        result: CommandResult,
        document: dict[str, Any],
        lines: list[str],
    ) -> None:
        """Print a command's outcome. Ids that name no activity of the queue then fail the command
        (exit status 1, ``"error": {"code": "not_found", ...}`` in the JSON document): a script
        must not take a typo or the wrong --queue for success. The others were acted on, or
        skipped for their state, which is no error (cancelling a cancelled activity again is fine)."""
        unknown = [
            item.id for item in result.results if item.error is not None and item.error.code == "not_found"
        ]
        message = None
        if unknown:
            message = (
                f"{len(unknown)} of {len(ids)} id(s) matched no activity in queue {queue}: "
                f"{', '.join(map(str, unknown[:20]))}{' ...' if len(unknown) > 20 else ''}"
            )
            document = {**document, "error": {"code": "not_found", "message": message, "field": "ids"}}
        self.emit(options, document, lines)
        if message is not None:
            raise CommandError(message)

    # -- output ---------------------------------------------------------------------------------

    def fail(
        self,
        options: Options,
        message: str,
        *,
        code: str = "invalid_argument",
        field: str | None = None,
        returncode: int = 1,
    ) -> NoReturn:
        if options.get("json"):
            error: dict[str, Any] = {"code": code, "message": message}
            if field:
                error["field"] = field
            self.stdout.write(json.dumps({"error": error}))
        raise CommandError(message, returncode=returncode)

    def emit(self, options: Options, document: dict[str, Any], lines: list[str]) -> None:
        if options.get("json"):
            self.stdout.write(json.dumps(document, default=str, sort_keys=False))
        else:
            for line in lines:
                self.stdout.write(line)

    def command_lines(self, verb: str, queue: str, result: CommandResult, *, dry_run: bool) -> list[str]:
        would = sum(1 for item in result.results if item.outcome == "would_apply")
        head = (
            f"{verb} on queue {queue}: {would} would be applied"
            if dry_run
            else f"{verb} on queue {queue}: applied {result.applied}"
        )
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
