"""``manage.py runnerq_status``: per queue, activities by status, the oldest runnable activity's
age, and the live workers with their capacity.

It reads what the admin overview reads (``storage.reads``), so it stays fast on millions of
rows: unfinished statuses are counted from ``idx_runnerq_query_status`` (each capped at
``STATUS_COUNT_CAP`` once there are more than ``GROUPED_COUNT_LIMIT`` unfinished rows), the
oldest runnable activity comes from a few probes of the dequeue index, and completed activities,
which no index counts, are counted exactly only while the whole table is under
``GROUPED_COUNT_LIMIT`` rows and estimated by the planner beyond that. Work due now is broken
down by type (a skip scan of the dequeue index, each type counted up to ``TYPE_COUNT_CAP``) and
each type marked with whether a live worker on the queue handles it.

With ``RUNNERQ['READ_REPLICA']`` set it reads that replica (it decides nothing, so a copy stale by
the replica's replay lag will do) and reports the lag; ``--database`` names another alias.

It also reports each database's xmin horizon (``storage.horizon``, read on the database itself,
not its replica): the oldest sessions, replication slots and prepared transactions holding back
what vacuum may remove, flagged once one has held it for ``RUNNERQ['HORIZON_HELD_SECONDS']`` (a transaction left
open slows every claim down as it ages: docs/how-to/production.md).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, TypedDict

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections

from runnerq_django import conf, routing
from runnerq_django.activities import handled_types
from runnerq_django.management.base import RunnerQCommand, bounded
from runnerq_django.management.commands._operator import JsonErrorsParser
from runnerq_django.management.preflight import DatabaseUnreachable, one_line_errors, require_database
from runnerq_django.spec.statuses import STORED_STATUSES
from runnerq_django.storage import flow, limits, pools, reads
from runnerq_django.storage import horizon as horizons
from runnerq_django.storage.errors import SchemaMissing

# How far the due work of each type is counted (shown as "1,000+" beyond). Each count reads the
# heap (the dequeue index has the due time as an expression): 10,000 per type made runnerq_status
# take 2.6 s on a backlog of 1,000,000 over 100 queue-type pairs (bench/backlog.py).
TYPE_COUNT_CAP = 1_000

# The report lists the first PAUSES_LISTED pauses (by queue, then type) and counts the rest:
# 20,000 pauses with 4 KB reasons would otherwise print 80 MB. runnerq_pause --list has them all.
PAUSES_LISTED = 50


class Command(RunnerQCommand):
    help = (
        "Show, per queue: activities by status, the age of the oldest runnable activity (how far behind "
        "the workers are), and the workers alive (seen in the last --alive seconds) with their slots."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = JsonErrorsParser  # a refused option is a JSON error document under --json
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Only these queues (repeatable); default: every queue with activities or workers.",
        )
        parser.add_argument(
            "--alive",
            type=bounded(float, 0.001, 365 * 86400),
            default=None,
            metavar="SECONDS",
            help="A worker counts as alive if its pool row was touched this recently "
            "(default: 3 x RUNNERQ['HEARTBEAT_SECONDS']).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON object instead of a table (its pauses: the first 50 in the queues' "
            "'paused' lists, 'pauses_total' in all).",
        )
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="Only this database alias, read as it is (default: every database that hosts a queue, "
            "RUNNERQ['DATABASE'] read from RUNNERQ['READ_REPLICA'] when set, and those of "
            "RUNNERQ['QUEUE_DATABASES']).",
        )

    @one_line_errors
    def handle(self, *args: Any, **opts: Any) -> None:
        """The report; under ``--json`` an error is also an ``{"error": {...}}`` document on
        stdout, as the operator commands print it."""
        error: dict[str, Any] | None = None
        try:
            self.report(opts)
        except (DatabaseUnreachable, SchemaMissing) as exc:
            error = {
                "code": "configuration" if isinstance(exc, SchemaMissing) else "unavailable",
                "message": str(exc),
            }
            raise
        except CommandError as exc:
            error = {"code": getattr(exc, "code", "invalid_argument"), "message": str(exc)}
            if field := getattr(exc, "field", None):
                error["field"] = field
            raise
        finally:
            if error is not None and opts["json"]:
                self.stdout.write(json.dumps({"error": error}))

    def report(self, opts: dict[str, Any]) -> None:
        from runnerq_django.storage.errors import InvalidArgument
        from runnerq_django.storage.validation import queue_name

        if opts["database"] and opts["database"] not in connections:
            raise _refused(
                f"--database: unknown database alias {opts['database']!r} (DATABASES has: {', '.join(connections)})",
                field="database",
            )
        for queue in opts["queues"] or []:
            try:
                queue_name(queue)
            except InvalidArgument as exc:
                raise _refused(f"--{exc.message}", field="queues") from None
        only = list(dict.fromkeys(opts["queues"])) if opts["queues"] else None
        # Each database that hosts a queue (RUNNERQ['QUEUE_DATABASES']), or --database alone; the
        # default one read from RUNNERQ['READ_REPLICA'] when set (it replicates that one only).
        if opts["database"]:
            reading = {opts["database"]: opts["database"]}
        else:
            home = conf.database_alias()
            reading = {
                alias: conf.console_read_alias() if alias == home else alias
                for alias in routing.databases(only)
            }
        for read in reading.values():
            require_database(read)
        alive = opts["alive"] if opts["alive"] is not None else 3 * float(conf.get("HEARTBEAT_SECONDS"))
        found: list[tuple[str, str, QueueStatus]] = []
        replica = None
        pauses_total = 0
        for alias, read in reading.items():
            try:
                on_alias = status_report(read, alive, only, routed=len(reading) > 1, home=alias)
                pauses_total += (
                    sum(flow.pause_counts(only, using=read).values())
                    if only
                    else flow.pause_total(using=read)
                )
                replica = replica or _replica(read)
            except DatabaseError as exc:
                raise _refused(
                    f"database {read!r}: {str(exc).strip()} (are the migrations applied?)", code="unavailable"
                ) from None
            found += [(alias, queue, entry) for queue, entry in on_alias.items()]
        report = merged(found)
        held = {alias: _horizon(alias) for alias in reading}
        alias = next(iter(reading.values()))
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "generated_at": datetime.now().astimezone().isoformat(),
                        "database": alias,
                        "replica": None if replica is None else replica.as_json(),
                        "queues": report,
                        # Pauses in effect in all (the queues' "paused" lists show the first ones).
                        "pauses_total": pauses_total,
                        "pauses_listed": sum(len(entry["paused"]) for entry in report.values()),
                        # Per database alias: what holds back vacuum (null: it could not be read).
                        "xmin_horizon": {
                            name: None if found is None else found.as_json() for name, found in held.items()
                        },
                    },
                    indent=2,
                    sort_keys=True,
                )
            )
            return
        self.stdout.write(render(report, alive, pauses_total) + replica_line(replica) + horizon_lines(held))


def _refused(message: str, *, code: str = "invalid_argument", field: str | None = None) -> CommandError:
    """A ``CommandError`` carrying what ``--json`` reports: the error's code and the field."""
    error = CommandError(message)
    error.code, error.field = code, field  # type: ignore[attr-defined]
    return error


class QueueStatus(TypedDict):
    """One queue's line of the report (and its object in ``--json``)."""

    counts: dict[str, int]
    capped: list[str]  # statuses counted up to reads.STATUS_COUNT_CAP: more exist
    estimated: list[str]  # statuses counted by the planner's estimate
    oldest_runnable_seconds: float | None
    workers: int
    slots: int
    # flow control: the queue ("activity_type": None) or types paused; at most PAUSES_LISTED in
    # the whole report (the first, by queue then type), and how many the queue has in all
    paused: list[dict[str, Any]]
    paused_count: int
    limited: dict[str, int]  # flow control: concurrency-limited type -> slots running now
    # Work due now by type: how much (up to TYPE_COUNT_CAP) and whether a live worker
    # on the queue handles the type (no: it waits, without an error, until one does).
    due_by_type: dict[str, DueType]
    database: str  # the database alias the queue's rows are on


class DueType(TypedDict):
    due: int
    handled: bool


def _empty() -> QueueStatus:
    return {
        "counts": {status: 0 for status in STORED_STATUSES},
        "capped": [],
        "estimated": [],
        "oldest_runnable_seconds": None,
        "workers": 0,
        "slots": 0,
        "paused": [],  # flow control: the queue ("activity_type": null) or types paused, by whom, why
        "paused_count": 0,
        "limited": {},  # flow control: concurrency-limited type -> slots running now
        "due_by_type": {},
        "database": "",
    }


def status_report(
    alias: str,
    alive_seconds: float,
    only: list[str] | None = None,
    *,
    routed: bool = False,
    home: str | None = None,
) -> dict[str, QueueStatus]:
    """Per queue: counts by status (``capped``: statuses counted up to the cap, more exist;
    ``estimated``: the planner's estimate), the oldest runnable activity's age, live workers.
    ``routed``: list only the queues that live on ``alias`` (``routing.database_for``) among the
    configured or asked-for ones, plus those with rows there (several databases); ``home``: the
    database ``alias`` is read for (a read replica's primary), ``alias`` itself by default."""
    report: dict[str, QueueStatus] = {}
    counts, capped = reads.unfinished_counts(alias, reads.STATUS_COUNT_CAP, reads.GROUPED_COUNT_LIMIT)

    def here(queues: set[str]) -> set[str]:
        return {q for q in queues if q and routing.database_for(q) == (home or alias)} if routed else queues

    if only:
        queues = sorted(here(set(only))) if routed else only
    else:
        configured = here(set(conf.get("QUEUES") or []) | {conf.get("DEFAULT_QUEUE")})
        found = configured | reads.queues_with_work(alias, 1000) | {queue for queue, _ in counts}
        queues = sorted(q for q in found if q)
    for queue in queues:
        entry = report[queue] = _empty()
        for status in STORED_STATUSES:
            if status != "completed":
                entry["counts"][status] = counts.get((queue, status), 0)
        entry["capped"] = sorted(capped)
    completed, estimated = completed_counts(alias, queues)
    now = reads.database_now(alias)
    oldest = reads.oldest_runnable(alias, queues)
    for queue in queues:
        report[queue]["counts"]["completed"] = completed.get(queue, 0)
        if estimated:
            report[queue]["estimated"] = ["completed"]
        since = oldest[queue][0]
        if since is not None:
            report[queue]["oldest_runnable_seconds"] = round(max(0.0, (now - since).total_seconds()), 3)
    for queue, types in handled_types.due_types(alias, queues, alive_seconds, TYPE_COUNT_CAP).items():
        report[queue]["due_by_type"] = {
            kind: {"due": due, "handled": handled} for kind, (due, handled) in types.items()
        }
    listed = (
        flow.pauses_in(only, PAUSES_LISTED, using=alias)
        if only
        else flow.pauses(limit=PAUSES_LISTED, using=alias)
    )
    for pause in listed[:PAUSES_LISTED]:
        report.setdefault(pause.queue_name, _empty())["paused"].append(
            {
                "activity_type": pause.activity_type or None,
                "paused_by": pause.paused_by,
                "reason": pause.reason,
                "paused_at": pause.paused_at.isoformat(),
            }
        )
    for queue, count in flow.pause_counts(list(report), using=alias).items():
        report[queue]["paused_count"] = count
    for use in limits.slots_in_use(using=alias):
        if only and use.queue_name not in only:
            continue
        report.setdefault(use.queue_name, _empty())["limited"][use.activity_type] = use.running
    for queue, capacity in pools.live_capacity(alive_seconds, using=alias).items():
        if only and queue not in only:
            continue
        entry = report.setdefault(queue, _empty())
        entry["workers"] = capacity.workers
        entry["slots"] = capacity.slots
    return dict(sorted(report.items()))


def merged(found: list[tuple[str, str, QueueStatus]]) -> dict[str, QueueStatus]:
    """One report of several databases' (``(alias, queue, entry)``), each entry naming its
    ``database``: keyed by queue, and a queue name with rows on a database it is not routed to
    as well as on its own is ``queue@alias`` there."""
    owners = {queue: alias for alias, queue, _ in found if routing.database_for(queue) == alias}
    report: dict[str, QueueStatus] = {}
    for alias, queue, entry in found:
        entry["database"] = alias
        key = queue if owners.get(queue, alias) == alias and queue not in report else f"{queue}@{alias}"
        report[key] = entry
    return dict(sorted(report.items()))


def completed_counts(alias: str, queues: list[str]) -> tuple[dict[str, int], bool]:
    """Completed activities per queue, and whether they are estimates. No index has an entry for
    every completed row (``idx_runnerq_query_status`` leaves them out, ``idx_runnerq_root_terminal``
    has only roots), so an exact count reads the table: done only while the whole table is under
    ``GROUPED_COUNT_LIMIT`` rows (a bounded probe tells), else the planner's estimate per queue."""
    from runnerq_django.models import Activity

    if reads.activities_up_to(alias, reads.GROUPED_COUNT_LIMIT + 1) <= reads.GROUPED_COUNT_LIMIT:
        return reads.completed_counts(alias, queues), False
    rows = Activity.objects.using(alias)
    return {
        queue: reads.estimated_rows(rows.filter(queue_name=queue, status="completed")) for queue in queues
    }, True


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def render(report: dict[str, QueueStatus], alive: float, pauses_total: int = 0) -> str:
    if not report:
        return "No activities and no live workers.\n"
    several = len({entry.get("database") for entry in report.values()}) > 1
    columns = [
        "queue",
        *(["database"] if several else []),
        *STORED_STATUSES,
        "oldest runnable",
        "workers",
        "slots",
    ]
    rows = [
        [
            queue,
            *([entry["database"]] if several else []),
            *(_count(entry, s) for s in STORED_STATUSES),
            _age(entry["oldest_runnable_seconds"]),
            str(entry["workers"]),
            str(entry["slots"]),
        ]
        for queue, entry in report.items()
    ]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    lines = [
        "  ".join(
            text.ljust(width) if i == 0 or (several and i == 1) else text.rjust(width)
            for i, (text, width) in enumerate(zip(line, widths))
        )
        for line in [columns, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(
        f"(workers: pool rows seen in the last {alive:g}s; oldest runnable: due and waiting for a worker)"
    )
    paused = [(queue, p) for queue, entry in report.items() for p in entry["paused"]]
    if paused:
        lines.append("paused (flow control; Go and TypeScript workers do not honour it):")
        for queue, p in paused:
            what = f"{queue}/{p['activity_type']}" if p["activity_type"] else f"{queue} (whole queue)"
            why = f": {p['reason']}" if p["reason"] else ""
            lines.append(f"  {what} by {p['paused_by']} since {p['paused_at']}{why}")
        if pauses_total > len(paused):
            lines.append(
                f"  (the first {len(paused):,} of {pauses_total:,} pauses; runnerq_pause --list prints them all)"
            )
    due = [(queue, kind, d) for queue, entry in report.items() for kind, d in entry["due_by_type"].items()]
    if due:
        lines.append(
            "due now, by type (UNHANDLED: no live worker on the queue handles the type, so it waits):"
        )
        for queue, kind, d in due:
            count = f"{d['due']:,}" + ("+" if d["due"] >= TYPE_COUNT_CAP else "")
            lines.append(f"  {queue}/{kind}: {count}" + ("" if d["handled"] else "  UNHANDLED"))
    limited = [(queue, kind, n) for queue, entry in report.items() for kind, n in entry["limited"].items()]
    if limited:
        lines.append("concurrency-limited types, slots running now (runnerq-django workers only):")
        lines.extend(f"  {queue}/{kind}: {n}" for queue, kind, n in limited)
    if any(entry["capped"] for entry in report.values()):
        lines.append(f"(N+: counted up to {reads.STATUS_COUNT_CAP:,}, there are more)")
    if any(entry["estimated"] for entry in report.values()):
        lines.append(
            "(~N: the planner's estimate; exact counts of completed activities would read the whole table)"
        )
    return "\n".join(lines) + "\n"


def _replica(alias: str) -> reads.ReplicaState | None:
    """The lag of ``alias`` when it is a standby or the configured replica; None for a primary."""
    if alias == conf.database_alias():
        return None
    state = reads.replica_state(alias)
    return state if state.standby or alias == conf.runnerq_settings().read_replica else None


def replica_line(replica: reads.ReplicaState | None) -> str:
    """What reading a replica means for the figures above ("" when the primary was read)."""
    if replica is None:
        return ""
    head = f"(read from the replica {replica.alias!r}"
    if not replica.standby:
        return f"{head}, which is not a standby: the figures are current)\n"
    if replica.lag_seconds is None:
        lag = "replay lag unknown: it has replayed no transaction since it started"
    else:
        lag = f"replay lag {_age(replica.lag_seconds)}"
    paused = ", replay paused" if replica.paused else ""
    return f"{head}: {lag}{paused}; the figures are that much behind the primary)\n"


def _horizon(alias: str) -> horizons.Horizon | None:
    """``alias``'s xmin horizon, or None when it can't be read (the report goes on without it)."""
    try:
        return horizons.horizon(alias, held_seconds=float(conf.get("HORIZON_HELD_SECONDS")))
    except DatabaseError:
        return None


def horizon_lines(held: dict[str, horizons.Horizon | None]) -> str:
    """Per database: the oldest holder of its xmin horizon, a warning when one holds it back."""
    lines = []
    for alias, found in held.items():
        where = f" ({alias})" if len(held) > 1 else ""
        if found is None:
            lines.append(f"xmin horizon{where}: could not be read")
            continue
        oldest = found.oldest
        if oldest is None:
            lines.append(f"xmin horizon{where}: nothing holds it back")
        else:
            lines.append(
                f"xmin horizon{where}: {'HELD BACK' if found.held else 'oldest'} by {_holder(oldest)}"
                + (
                    "; vacuum can remove nothing that died since, and every claim walks past the dead "
                    "entries (docs/how-to/production.md: a transaction left open)"
                    if found.held
                    else ""
                )
            )
            lines.extend(
                f"  also {_holder(holder)}" for holder in found.holders[1:] if holder.held(found.held_seconds)
            )
        if found.hidden_sessions:
            lines.append(
                f"  ({found.hidden_sessions} session(s) of other roles not visible: grant pg_read_all_stats to see them)"
            )
    return "\n".join(lines) + "\n" if lines else ""


def _holder(holder: horizons.HorizonHolder) -> str:
    what = {"session": "session", "replication_slot": "replication slot", "prepared": "prepared transaction"}
    parts = [f"pid {holder.pid}"] if holder.pid is not None else []
    parts += [p for p in (holder.state, holder.role and f"role {holder.role}") if p]
    age = f"open {_age(holder.seconds)}, " if holder.seconds is not None else ""
    return (
        f"{what.get(holder.kind, holder.kind)} {holder.name!r} ({', '.join(parts)}): "
        f"{age}{holder.xid_age:,} transactions behind"
    )


def _count(entry: QueueStatus, status: str) -> str:
    value = entry["counts"].get(status, 0)
    if status in entry["estimated"]:
        return f"~{value}"
    if status in entry["capped"]:  # a lower bound: the scan stopped at the cap
        return f"{min(value, reads.STATUS_COUNT_CAP)}+"
    return str(value)
