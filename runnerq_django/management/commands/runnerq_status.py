"""``manage.py runnerq_status``: per queue, activities by status, the oldest runnable activity's
age, and the live workers with their capacity."""

from __future__ import annotations

import json
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from runnerq_django import conf
from runnerq_django.spec.statuses import STORED_STATUSES
from runnerq_django.storage import pools

# "Runnable now": the claimable set, due. The statuses are literals so the dequeue index's
# predicate applies (see models.py).
OLDEST_RUNNABLE_SQL = """
SELECT queue_name, extract(epoch FROM now() - min(COALESCE(scheduled_at, created_at)))
  FROM runnerq_activities
 WHERE status IN ('pending', 'scheduled', 'retrying', 'waiting')
   AND (status = 'pending' OR scheduled_at <= now())
 GROUP BY queue_name
"""
COUNTS_SQL = "SELECT queue_name, status, count(*) FROM runnerq_activities GROUP BY queue_name, status"


class Command(BaseCommand):
    help = ("Show, per queue: activities by status, the age of the oldest runnable activity (how far behind "
            "the workers are), and the workers alive (seen in the last --alive seconds) with their slots.")

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="Only these queues (repeatable); default: every queue with activities or workers.")
        parser.add_argument("--alive", type=float, default=None, metavar="SECONDS",
                            help="A worker counts as alive if its pool row was touched this recently "
                                 "(default: 3 x RUNNERQ['HEARTBEAT_SECONDS']).")
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")
        parser.add_argument("--database", metavar="ALIAS", help="Database alias (default: RUNNERQ['DATABASE']).")

    def handle(self, *args, **opts):
        from runnerq_django.storage.errors import InvalidArgument
        from runnerq_django.storage.validation import queue_name

        alias = opts["database"] or conf.database_alias()
        if alias not in connections:
            raise CommandError(f"--database: unknown database alias {alias!r} (DATABASES has: {', '.join(connections)})")
        for queue in opts["queues"] or []:
            try:
                queue_name(queue)
            except InvalidArgument as exc:
                raise CommandError(f"--{exc.message}") from None
        alive = opts["alive"] if opts["alive"] is not None else 3 * float(conf.get("HEARTBEAT_SECONDS"))
        report = status_report(alias, alive)
        if opts["queues"]:
            report = {queue: report.get(queue, _empty()) for queue in opts["queues"]}
        if opts["json"]:
            self.stdout.write(json.dumps({"generated_at": datetime.now().astimezone().isoformat(), "queues": report},
                                         indent=2, sort_keys=True))
            return
        self.stdout.write(render(report, alive))


def _empty() -> dict:
    return {"counts": {status: 0 for status in STORED_STATUSES}, "oldest_runnable_seconds": None,
            "workers": 0, "slots": 0}


def status_report(alias: str, alive_seconds: float) -> dict[str, dict]:
    report: dict[str, dict] = {}
    with connections[alias].cursor() as cursor:
        cursor.execute(COUNTS_SQL)
        for queue, status, count in cursor.fetchall():
            report.setdefault(queue, _empty())["counts"][status] = count
        cursor.execute(OLDEST_RUNNABLE_SQL)
        for queue, age in cursor.fetchall():
            report.setdefault(queue, _empty())["oldest_runnable_seconds"] = round(max(0.0, float(age)), 3)
    for queue, capacity in pools.live_capacity(alive_seconds, using=alias).items():
        entry = report.setdefault(queue, _empty())
        entry["workers"] = capacity.workers
        entry["slots"] = capacity.slots
    return dict(sorted(report.items()))


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


def render(report: dict[str, dict], alive: float) -> str:
    if not report:
        return "No activities and no live workers.\n"
    columns = ["queue", *STORED_STATUSES, "oldest runnable", "workers", "slots"]
    rows = [[queue, *(str(entry["counts"].get(s, 0)) for s in STORED_STATUSES), _age(entry["oldest_runnable_seconds"]),
             str(entry["workers"]), str(entry["slots"])] for queue, entry in report.items()]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    lines = ["  ".join(text.ljust(width) if i == 0 else text.rjust(width) for i, (text, width) in enumerate(zip(line, widths)))
             for line in [columns, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(f"(workers: pool rows seen in the last {alive:g}s; oldest runnable: due and waiting for a worker)")
    return "\n".join(lines) + "\n"
