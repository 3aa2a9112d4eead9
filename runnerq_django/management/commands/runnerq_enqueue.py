"""``manage.py runnerq_enqueue TYPE [PAYLOAD]``: enqueue one activity from the command line."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.base import Options
from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import validation

PRIORITY_NAMES = {"low": 1, "normal": 2, "high": 3, "critical": 4}
ON_DUPLICATE = ("return_existing", "allow_reuse", "allow_reuse_on_failure", "no_reuse")


class Command(OperatorCommand):
    help = (
        "Enqueue one activity of TYPE with a JSON PAYLOAD (default null; '-' reads it from stdin). "
        "Options not given come from the registered @activity of that type, if any, else the defaults. "
        "Any RunnerQ worker serving the queue (Python, Go or TypeScript) can run it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("type", help="Activity type (the handler's registered name).")
        parser.add_argument(
            "payload", nargs="?", default=None, help="JSON payload, e.g. '{\"order\": 42}'; '-' reads stdin."
        )
        parser.add_argument("--priority", help="1..4 or low|normal|high|critical.")
        parser.add_argument("--delay", type=float, default=None, help="Seconds from now before it may run.")
        parser.add_argument("--max-attempts", type=int, default=None, help="Attempt limit (0 = unlimited).")
        parser.add_argument("--timeout", type=float, default=None, help="Seconds an attempt may take.")
        parser.add_argument("--retry-delay", type=float, default=None, help="Backoff base in seconds.")
        parser.add_argument("--key", dest="idempotency_key", help="Idempotency key (the application key).")
        parser.add_argument(
            "--on-duplicate",
            choices=ON_DUPLICATE,
            default="return_existing",
            help="What a duplicate key does (default return_existing).",
        )
        parser.add_argument(
            "--metadata",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="A metadata entry (repeatable).",
        )
        parser.add_argument("--id", dest="activity_id", help="The activity id (default: a new UUID).")
        self.add_common(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from runnerq_django import client, storage

        payload = self.payload(options)
        metadata: dict[str, str] = {}
        for entry in options["metadata"]:
            key, sep, value = entry.partition("=")
            if not sep or not key:
                self.fail(options, f"--metadata takes KEY=VALUE, got {entry!r}", field="metadata")
            metadata[key] = value
        priority = options.get("priority")
        if priority is not None:
            priority = PRIORITY_NAMES.get(priority.lower(), priority)
            try:
                priority = int(priority)
            except ValueError:
                self.fail(
                    options,
                    f"--priority must be 1..4 or low|normal|high|critical, got {options['priority']!r}",
                    field="priority",
                )
        queue, new = self.checked(
            options,
            lambda: client.build_activity(
                options["type"],
                payload,
                delay=options.get("delay"),
                priority=priority,
                idempotency_key=options.get("idempotency_key"),
                on_duplicate=options["on_duplicate"],
                metadata=metadata or None,
                queue=options.get("queue"),
                max_attempts=options.get("max_attempts"),
                timeout=options.get("timeout"),
                retry_delay=options.get("retry_delay"),
                id=options.get("activity_id"),
            ),
        )
        self.checked(options, lambda: (validation.queue_name(queue), validation.new_activity(new)))
        document = {
            "queue": queue,
            "id": str(new.id),
            "type": new.activity_type,
            "priority": new.priority,
            "max_attempts": new.max_retries,
            "delay_seconds": new.delay_seconds,
            "dry_run": options["dry_run"],
        }
        if options["dry_run"]:
            self.emit(
                options,
                {**document, "created": False},
                [f"Would enqueue {new.activity_type} {new.id} on queue {queue} (dry run: nothing written)."],
            )
            return
        alias = self.alias(options, queue)
        result = self.checked(options, lambda: storage.submit(queue, new, using=alias))
        document.update(id=str(result.id), created=result.created)
        line = (
            f"Enqueued {new.activity_type} {result.id} on queue {queue}."
            if result.created
            else f"Not enqueued: key {options.get('idempotency_key')!r} already belongs to {result.id} (return_existing)."
        )
        self.emit(options, document, [self.style.SUCCESS(line) if result.created else line])

    def payload(self, options: Options) -> Any:
        text = options.get("payload")
        if text is None:
            return None
        if text == "-":
            text = sys.stdin.read()
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            self.fail(
                options,
                f"payload is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                field="payload",
            )
        except RecursionError:  # the parser recurses; the storage check names the limit
            self.fail(
                options, validation.too_deep("payload", validation.max_json_depth()).message, field="payload"
            )
