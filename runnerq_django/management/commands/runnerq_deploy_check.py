"""``manage.py runnerq_deploy_check``: what the code about to run would strand in the database."""

from __future__ import annotations

import importlib
import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from runnerq_django.management.base import RunnerQCommand


class Command(RunnerQCommand):
    help = (
        "Compare the code about to run (the activity types it registers, the version gates it declares) "
        "with the unfinished work of the database, and report with counts and example ids: activities of "
        "a type no handler registers any more, parents waiting on such a child, canvases naming such a "
        "type, and live runs that recorded a version of a gate older than the code serves. Exits 1 when "
        "it finds something, so a deploy pipeline can stop on it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="Import this module first (handlers not autodiscovered); repeatable.",
        )
        parser.add_argument(
            "--ignore-type",
            action="append",
            default=[],
            metavar="TYPE",
            help="A type handled elsewhere (a Go or TypeScript worker); repeatable.",
        )
        parser.add_argument(
            "--database", action="append", default=None, help="Check this alias only; repeatable."
        )
        parser.add_argument("--json", action="store_true", help="Print the findings as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        from runnerq_django.activities.registry import registry
        from runnerq_django.management import deploy_check

        for module in options["imports"]:
            importlib.import_module(module)
        findings = deploy_check.run(registry, aliases=options["database"], ignore=options["ignore_type"])
        if options["json"]:
            self.stdout.write(json.dumps({"ok": not findings, "findings": [f.document() for f in findings]}))
        elif not findings:
            self.stdout.write("Deploy check: nothing would be stranded.")
        else:
            for finding in findings:
                examples = f" (e.g. {', '.join(finding.examples)})" if finding.examples else ""
                self.stdout.write(f"[{finding.kind}] {finding.database}: {finding.message}{examples}")
        if findings:
            raise CommandError(f"deploy check: {len(findings)} finding(s)", returncode=1)
