"""``manage.py runscheduler``: run the periodic-job scheduler (jobs declared in code)."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from runnerq_django import conf
from runnerq_django.management.base import ServiceCommand, within
from runnerq_django.management.preflight import one_line_errors, wait_for_database


def _rule(key: str) -> conf.Rule:
    return conf.rule(key, conf.SCHEDULER_RULES)


class Command(ServiceCommand):
    help = (
        "Run the periodic-job scheduler: enqueue one RunnerQ activity per due occurrence of every job declared "
        "with @periodic or RUNNERQ['SCHEDULER']['JOBS']. Run as many as you like: Postgres makes each occurrence "
        "happen once (idempotency key per job and nominal instant), and a lease row elects one owner per "
        "namespace that enqueues and writes the cache records (the highest --release wins). SIGTERM or Ctrl-C "
        "stops after the current tick and hands the lease over at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--namespace",
            help="Scheduler namespace, 1-40 letters, digits, _ . or - "
            "(default: RUNNERQ['SCHEDULER']['NAMESPACE']).",
        )
        # --release is stored in the lease row's integer column, hence its upper bound.
        parser.add_argument(
            "--release",
            type=within(int, _rule("RELEASE"), high=2**31 - 1),
            help="Deploy precedence (default: RUNNERQ['SCHEDULER']['RELEASE']); a higher one takes "
            "the lease from a running lower one.",
        )
        parser.add_argument(
            "--takeover",
            action="store_true",
            help="Take the lease at start whatever its owner's release (operator action, e.g. a "
            "rollback); the fencing token is bumped so the old owner can no longer enqueue.",
        )
        # argparse bounds the range; conf's rule of the setting then refuses 0 naming the flag.
        for flag, dest, key, what in (
            (
                "--max-interval",
                "max_interval",
                "MAX_INTERVAL_SECONDS",
                "Longest sleep between ticks, at most a third of the lease",
            ),
            (
                "--lease",
                "lease_seconds",
                "LEASE_SECONDS",
                "Lease length, at least three times the max interval",
            ),
        ):
            parser.add_argument(
                flag,
                type=within(float, _rule(key), low=0),
                dest=dest,
                metavar="SECONDS",
                help=f"{what} (default: RUNNERQ['SCHEDULER']['{key}']).",
            )
        parser.add_argument("--once", action="store_true", help="Run one tick, print its summary and exit.")
        parser.add_argument("--migrate", action="store_true", help="Apply migrations first, then start.")
        parser.add_argument(
            "--log-format",
            choices=["text", "json", "django"],
            default="text",
            help="text: 'time LEVEL event key=value ...' (default); json: one object per line; "
            "django: leave the project's LOGGING as configured.",
        )

    @one_line_errors
    def handle(self, *args: Any, **opts: Any) -> None:
        from runnerq_django.scheduler import declarations
        from runnerq_django.scheduler.cachetable import ensure_cache_table
        from runnerq_django.scheduler.service import (
            SchedulerMisconfigured,
            SchedulerService,
            build_core,
            check_configuration,
        )

        # The options given here, by the same rules as the settings (before anything starts).
        bad = conf.scheduler_command_line_problems(
            {
                "NAMESPACE": opts["namespace"],
                "RELEASE": opts["release"],
                "LEASE_SECONDS": opts["lease_seconds"],
                "MAX_INTERVAL_SECONDS": opts["max_interval"],
            }
        )
        if bad:
            raise CommandError("; ".join(bad))
        self.start_logging(opts)
        wait_for_database(conf.database_alias(), tables=False)
        self.migrate_if_asked(opts)
        wait_for_database(conf.database_alias())
        try:
            check_configuration()  # the same refusal as the service's (runworker --scheduler)
        except SchedulerMisconfigured as exc:
            raise CommandError(str(exc)) from None
        ensure_cache_table()
        jobs = declarations.jobs()
        core = build_core(
            jobs,
            namespace=opts["namespace"],
            release=opts["release"],
            lease_seconds=opts["lease_seconds"],
            max_interval=opts["max_interval"],
        )
        if opts["once"]:
            if opts["takeover"] and core.fencing:
                core.lease.take_over()
            report = core.tick()
            core.close()
            if report.db_error:
                raise CommandError(f"tick failed: {report.db_error}")
            self.stdout.write(
                f"tick at {report.now:%Y-%m-%dT%H:%M:%SZ}: owner={report.owner} enqueued={report.count_enqueued()} "
                f"already={sum(len(v) for v in report.existing.values())} repairs={len(report.repairs)} "
                f"degraded={report.degraded}"
            )
            return
        stop = threading.Event()
        received: list[int] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            received.append(signum)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
        self.stdout.write(
            f"Scheduler started: {len(jobs)} job(s), namespace {core.namespace!r}, node {core.node}"
        )
        self.stdout.flush()
        service = SchedulerService(core, takeover=opts["takeover"], checked=True)
        service.run(stop)
        self.stdout.write(f"Scheduler stopped after {service.ticks} tick(s).")
