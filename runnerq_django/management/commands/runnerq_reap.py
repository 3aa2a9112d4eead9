"""``manage.py runnerq_reap``: take back activities whose worker's lease expired."""

from __future__ import annotations

from runnerq_django import conf
from runnerq_django.management.commands._operator import OperatorCommand
from runnerq_django.storage import reads


class Command(OperatorCommand):
    help = (
        "Run the reaper now: every running activity whose lease expired (its worker died or hung) is "
        "requeued with the attempt counted (event Requeued), or dead-lettered on its last attempt "
        "(event DeadLetter, reason lease_expired). Workers do this on their own every "
        "RUNNERQ['REAPER_INTERVAL_SECONDS']; this is for when none is running."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--limit",
            type=int,
            default=None,
            help=f"Leases per statement, 1..1000 (default RUNNERQ['REAPER_BATCH'] = {conf.get('REAPER_BATCH')}).",
        )
        parser.add_argument(
            "--max-batches",
            type=int,
            default=0,
            help="Stop after this many batches per queue (0 = until done).",
        )
        self.add_common(parser, many_queues=True)

    def handle(self, *args, **options) -> None:
        from runnerq_django import storage

        limit = options["limit"] if options["limit"] is not None else int(conf.get("REAPER_BATCH"))
        if not 1 <= limit <= 1000:
            self.fail(options, f"--limit must be 1..1000, got {limit}", field="limit")
        alias = self.alias(options)
        queues = self.queues(options)
        report = {"dry_run": options["dry_run"], "queues": {}}
        lines = []
        for queue in queues:
            if options["dry_run"]:
                expired = self.expired(alias, queue)
                report["queues"][queue] = {"expired": expired}
                lines.append(f"{queue}: {expired} expired lease(s) would be reaped; nothing changed.")
                continue
            total, batches = 0, 0
            while True:
                n = self.checked(options, lambda: storage.reap(queue, limit, using=alias))
                total += n
                batches += 1
                if n < limit or (options["max_batches"] and batches >= options["max_batches"]):
                    break
            report["queues"][queue] = {"reaped": total, "batches": batches}
            lines.append(f"{queue}: reaped {total} expired lease(s).")
        self.emit(options, report, lines)

    @staticmethod
    def expired(alias: str, queue: str) -> int:
        return reads.expired_leases(alias, queue)
