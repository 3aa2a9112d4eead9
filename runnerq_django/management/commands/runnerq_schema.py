"""``manage.py runnerq_schema check|migrate``: compare the live RunnerQ tables with the spec's
catalog, or bring them to it with the spec's migration procedure (the same one ``migrate`` runs,
without Django's migration bookkeeping, so it also serves databases shared with other SDKs)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from runnerq_django import routing
from runnerq_django.management.base import RunnerQCommand, bounded
from runnerq_django.management.preflight import one_line_errors, require_database
from runnerq_django.schema import compare as schema
from runnerq_django.spec.catalog import load
from runnerq_django.storage import session


class Command(RunnerQCommand):
    help = (
        "Check the live RunnerQ schema against the spec's catalog.json (check), or migrate it with "
        "the spec's procedure (migrate). `check` exits 1 when the database differs."
    )
    # Both actions must work on a database whose other checks fail: they are how an operator
    # finds out what is wrong.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{check,migrate}")
        check = actions.add_parser(
            "check",
            help="Compare the live schema with catalog.json; one line per difference; exit 1 on any.",
            called_from_command_line=getattr(self, "_called_from_command_line", False),
        )
        check.add_argument("--json", action="store_true", help="Print the report as one JSON object.")
        migrate = actions.add_parser(
            "migrate",
            help="Run the spec's migration procedure (no DDL at all when the schema already matches).",
            called_from_command_line=getattr(self, "_called_from_command_line", False),
        )
        migrate.add_argument(
            "--lock-timeout",
            type=bounded(float, 0, 24 * 3600),
            default=600.0,
            help="Seconds to wait for the schema advisory lock held by another migrator (default 600).",
        )
        for sub in (check, migrate):
            sub.add_argument(
                "--database",
                default=None,
                help="Database alias (default: every database that hosts a queue: RUNNERQ['DATABASE'], "
                "itself 'default' by default, and those of RUNNERQ['QUEUE_DATABASES']).",
            )

    @one_line_errors
    def handle(self, *args: Any, action: str, database: str | None = None, **options: Any) -> None:
        aliases = [database] if database else routing.databases()
        for alias in aliases:
            if alias not in connections:
                raise CommandError(f"unknown database alias {alias!r}")
            require_database(alias, tables=False)  # missing tables are what check reports and migrate makes
        if action == "check":
            self.check_schemas(aliases, as_json=options.get("json", False))
        else:
            for alias in aliases:
                self.migrate_schema(alias, lock_timeout=options["lock_timeout"])

    def check_schemas(self, aliases: list[str], *, as_json: bool) -> None:
        """Each database's report (one JSON object for one database, ``{"ok", "databases": [...]}``
        for several), then one error counting the differences of them all."""
        reports = [self.check_schema(alias, as_json=as_json) for alias in aliases]
        differences = [d for report in reports for d in report.pop("found")]
        if as_json:
            document = (
                reports[0]
                if len(reports) == 1
                else {"ok": all(r["ok"] for r in reports), "databases": reports}
            )
            self.stdout.write(json.dumps(document, indent=2))
        if differences:
            tolerable = sum(d.tolerable for d in differences)
            note = f" ({tolerable} tolerable: retired indexes only cost writes)" if tolerable else ""
            where = "" if len(reports) == 1 else f" in {sum(1 for r in reports if not r['ok'])} database(s)"
            raise CommandError(
                f"{len(differences)} difference{'s' if len(differences) != 1 else ''}{where}{note}. "
                "`manage.py runnerq_schema migrate` repairs what the spec's migration repairs.",
                returncode=1,
            )

    def check_schema(self, alias: str, *, as_json: bool) -> dict[str, Any]:
        connection = connections[alias]
        try:
            differences = schema.check_connection(connection)
            where = _where(connection)
        except DatabaseError as exc:
            raise CommandError(f"could not read the schema of database {alias!r}: {exc}") from exc
        catalog = load("schema/postgres/catalog.json")
        report = {
            "database": alias,
            **where,
            "ok": not differences,
            "differences": [d.as_dict() for d in differences],
        }
        if not as_json:
            self.stdout.write(
                f"RunnerQ schema of database {alias!r} ({where['schema']} on {where['server']}) "
                "against the spec's catalog.json:"
            )
            for difference in differences:
                self.stdout.write(f"  {difference}")
            if not differences:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"OK: {len(catalog['tables'])} tables and {len(catalog['indexes'])} indexes match, "
                        f"no retired object, fillfactor {schema.FILLFACTOR}."
                    )
                )
        # For check_schemas: the differences themselves, removed before the JSON is printed.
        return {**report, "found": differences}

    def migrate_schema(self, alias: str, *, lock_timeout: float) -> None:
        from runnerq_django.schema.migrator import migrate_schema

        try:
            ran = migrate_schema(connections[alias], lock_timeout=lock_timeout)
        except schema.SchemaMismatch as exc:
            raise CommandError(str(exc)) from exc
        except TimeoutError as exc:
            raise CommandError(f"{exc}: another process is migrating the schema; try again later") from exc
        if ran:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Migrated the RunnerQ schema of database {alias!r}; it now matches the catalog."
                )
            )
        else:
            self.stdout.write(
                f"The RunnerQ schema of database {alias!r} already matches the catalog; no DDL ran."
            )


def _where(connection: BaseDatabaseWrapper) -> dict[str, str]:
    current, version = session.server_and_schema(connection.alias)
    return {"schema": current or "(no schema on search_path)", "server": f"PostgreSQL {version.split()[0]}"}
