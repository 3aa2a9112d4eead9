"""``manage.py runnerq_schedule``: every declared periodic job's state, read-only."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django import conf
from runnerq_django.management.base import RunnerQCommand
from runnerq_django.management.preflight import one_line_errors, require_database


def _iso(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else "-"


class Command(RunnerQCommand):
    help = (
        "Print each declared periodic job: its cache record state (present, missing, unreadable, schema, "
        "schedule_changed, stale_definition; invalid for a declaration the scheduler does not run, with why), last and next occurrence, the last occurrence Postgres has "
        "enqueued, the lease owner and the repair counts. Reads only: it writes nothing to the cache or the "
        "database (repairs happen in the scheduler's tick, never here). With a verb (list, get, create, update, "
        "pause, resume, delete, run, history) it reads or changes the schedules kept in Postgres instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--namespace", help="Scheduler namespace (default: RUNNERQ['SCHEDULER']['NAMESPACE'])."
        )
        parser.add_argument("--json", action="store_true", help="One JSON object per job.")
        from runnerq_django.scheduler import cli

        cli.add_arguments(parser)  # the verbs on runtime schedules (list, create, update ...)

    @one_line_errors
    def handle(self, *args: Any, **opts: Any) -> None:
        from runnerq_django.scheduler.status import job_states

        require_database(conf.database_alias())
        if opts.get("verb"):
            from runnerq_django.scheduler import cli

            cli.run(opts["verb"], opts, self.stdout.write)
            return
        states = job_states(namespace=opts["namespace"])
        if opts["json"]:
            for state in states:
                self.stdout.write(
                    json.dumps(
                        {
                            "id": state.id,
                            "schedule": state.schedule,
                            "state": state.state,
                            "detail": state.detail,
                            "last": _iso(state.last),
                            "next": _iso(state.next),
                            "source": state.source,
                            "last_enqueued": _iso(state.last_enqueued),
                            "owner": state.owner,
                            "owner_release": state.owner_release,
                            "lease_expires_at": _iso(state.lease_expires_at),
                            "lease_expired": state.lease_expired,
                            "repairs": state.repairs,
                        }
                    )
                )
            return
        if not states:
            self.stdout.write("No periodic jobs are declared.")
            return
        first = states[0]
        owner = (
            f"{first.owner} (release {first.owner_release}, lease "
            f"{'expired' if first.lease_expired else 'until'} {_iso(first.lease_expires_at)})"
            if first.owner
            else "none (no scheduler has taken the lease)"
        )
        self.stdout.write(f"Owner: {owner}")
        header = ("JOB", "RECORD", "LAST", "NEXT", "FROM", "LAST ENQUEUED", "REPAIRS", "SCHEDULE")
        rows = [header]
        for state in states:
            repairs = ",".join(f"{reason}={count}" for reason, count in sorted(state.repairs.items())) or "0"
            rows.append(
                (
                    state.id,
                    state.state,
                    _iso(state.last),
                    _iso(state.next),
                    state.source,
                    _iso(state.last_enqueued),
                    repairs,
                    state.schedule,
                )
            )
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
        for row in rows:
            self.stdout.write("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
        invalid = [state for state in states if state.state == "invalid"]
        if invalid:
            self.stdout.write("Not scheduled (invalid declarations; manage.py check lists them):")
            for state in invalid:
                self.stdout.write(f"  {state.id}: {state.detail}")
