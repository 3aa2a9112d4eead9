"""``manage.py runworker``: run RunnerQ activities from the configured queues."""

from __future__ import annotations

import argparse
import ipaddress
import os
import threading
from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser

from runnerq_django import conf, metrics, routing
from runnerq_django.logs import FORMATS
from runnerq_django.management.base import Options, ServiceCommand, bounded, limits, within
from runnerq_django.management.preflight import one_line_errors, wait_for_database
from runnerq_django.worker.exit_status import EX_CONFIG, EX_UNAVAILABLE

if TYPE_CHECKING:
    from runnerq_django.worker.options import WorkerOptions
    from runnerq_django.worker.runtime import MultiDatabaseWorker, Worker

MAX_PROCESSES = 64
CONCURRENCY, LEASE, POLL_INTERVAL, SHUTDOWN_GRACE, MAX_ACTIVITIES, MAX_MEMORY = (
    conf.rule(key)
    for key in (
        "CONCURRENCY",
        "LEASE_SECONDS",
        "POLL_INTERVAL_SECONDS",
        "SHUTDOWN_GRACE_SECONDS",
        "MAX_ACTIVITIES_PER_PROCESS",
        "MAX_MEMORY_PER_PROCESS_MB",
    )
)


def _csv_list(values: list[str] | None) -> list[str] | None:
    """``-q a -q b`` and ``-q a,b`` both work."""
    if not values:
        return None
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    return list(dict.fromkeys(items)) or None


# Where --metrics-port listens unless --metrics-address says otherwise: loopback, because the
# endpoint has no authentication and shows queue names, types and rates to whoever reaches it.
METRICS_ADDRESS = "127.0.0.1"


def _ip_address(text: str) -> str:
    """An argparse ``type``: an IPv4 or IPv6 address, as given."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an IP address (127.0.0.1, 0.0.0.0, ::1, ::), got {text!r}"
        ) from None
    return text


class Command(ServiceCommand):
    help = (
        "Run a RunnerQ worker: claim activities from the queues, run their @activity handlers on a pool of "
        "threads (and processes with --processes), renew leases, retry and dead-letter failures, reap expired "
        "leases and sweep finished work (one worker at a time across the fleet). SIGTERM or Ctrl-C drains "
        "gracefully: no new claims, running handlers get --shutdown-grace seconds, the rest is released for "
        "other workers at once; a second signal exits immediately (what was running returns to the queue "
        "when its lease runs out)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Queue to serve; repeat or comma-separate for several (default: RUNNERQ['QUEUES']).",
        )
        parser.add_argument(
            "-t",
            "--activity-type",
            action="append",
            dest="activity_types",
            metavar="TYPE",
            help="Only claim these activity types (workload isolation: e.g. a worker just for "
            "'reports.render'); repeat or comma-separate. Default: every type with a handler "
            "in this process, so work for Go/TypeScript handlers is left to them.",
        )
        parser.add_argument(
            "-c",
            "--concurrency",
            type=within(int, CONCURRENCY),
            metavar="N",
            help="Handler threads per process, i.e. activities run at once (default: RUNNERQ['CONCURRENCY']).",
        )
        parser.add_argument(
            "-p",
            "--processes",
            type=bounded(int, 1, MAX_PROCESSES),
            default=1,
            metavar="N",
            help="Worker processes, each with --concurrency threads (default 1). Use more for "
            "CPU-bound handlers; the parent supervises and restarts them.",
        )
        parser.add_argument(
            "--max-activities-per-process",
            type=within(int, MAX_ACTIVITIES),
            dest="max_activities",
            metavar="N",
            help="Recycle a worker process once it has claimed N activities: it stops claiming, lets "
            "its handlers finish, exits with status 75, and the parent of --processes starts a fresh "
            "one at once (default: RUNNERQ['MAX_ACTIVITIES_PER_PROCESS'], no limit).",
        )
        parser.add_argument(
            "--max-memory-per-process",
            type=within(int, MAX_MEMORY),
            dest="max_memory_mb",
            metavar="MB",
            help="Recycle a worker process, as with --max-activities-per-process, once its resident "
            "memory passes MB MiB; a process-mode handler's child is held to it on its own "
            "(default: RUNNERQ['MAX_MEMORY_PER_PROCESS_MB'], no limit).",
        )
        parser.add_argument(
            "--lease",
            type=float,
            dest="lease_seconds",
            metavar="SECONDS",
            help="Claim lease length: a worker that dies loses its activities to the reaper after "
            "this long. Renewed several times per lease (default: RUNNERQ['LEASE_SECONDS']).",
        )
        # 0 here (not in the setting) releases running handlers' activities at once.
        parser.add_argument(
            "--shutdown-grace",
            type=within(float, SHUTDOWN_GRACE, low=0),
            dest="shutdown_grace_seconds",
            metavar="SECONDS",
            help="On SIGTERM/SIGINT, how long running handlers may finish before their activities are "
            "released to other workers (default: RUNNERQ['SHUTDOWN_GRACE_SECONDS']).",
        )
        parser.add_argument(
            "--poll-interval",
            type=within(float, POLL_INTERVAL),
            dest="poll_interval_seconds",
            metavar="SECONDS",
            help="How often to look for due work without a NOTIFY: delayed activities, retries and "
            "timers start within this much of their time (default: RUNNERQ['POLL_INTERVAL_SECONDS']).",
        )
        parser.add_argument(
            "--no-listen",
            action="store_false",
            dest="listen",
            default=None,
            help="Don't LISTEN for new work, only poll (for PgBouncer in transaction pooling mode; "
            "same as RUNNERQ['LISTEN'] = False).",
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_false",
            dest="maintenance",
            default=True,
            help="Don't take part in reaping expired leases and retention sweeps.",
        )
        parser.add_argument(
            "--scheduler", action="store_true", help="Also run the periodic-job scheduler in this process."
        )
        parser.add_argument(
            "--until-idle",
            action="store_true",
            help="Exit (status 0, after a graceful drain) as soon as no activity of this worker's "
            "types is due or running in its queues: for cron-driven workers, scripts and "
            "tests. Work scheduled for later is left for the next run; due work whose input is in a "
            "serialization it doesn't read (another SDK's) is left too, named in a warning "
            "(worker.idle_left_unclaimable).",
        )
        parser.add_argument(
            "--migrate", action="store_true", help="Apply migrations first (manage.py migrate), then start."
        )
        parser.add_argument(
            "--import",
            action="append",
            dest="imports",
            metavar="MODULE",
            default=[],
            help="Import a module that defines @activity handlers outside the installed apps' "
            "'activities' modules; repeatable.",
        )
        parser.add_argument(
            "--log-format",
            choices=[*FORMATS, "django"],
            default="text",
            help="'text' (event key=value), 'json' (one object per line), or 'django' to leave the "
            "project's LOGGING as configured. One line per state change; per-activity "
            "start/complete lines at -v 2.",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="Serve Prometheus metrics on this port (needs prometheus-client; with --processes, "
            "child i uses PORT+i), without authentication, on --metrics-address.",
        )
        parser.add_argument(
            "--metrics-address",
            type=_ip_address,
            default=None,
            metavar="ADDRESS",
            help="The IP address --metrics-port listens on (default: 127.0.0.1, this machine only, "
            "since the endpoint has no authentication; 0.0.0.0 or :: for every address, e.g. in a "
            "container that Prometheus scrapes from outside).",
        )
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="Serve every queue on this database alias (default: each queue on its own, "
            "RUNNERQ['QUEUE_DATABASES'], else RUNNERQ['DATABASE']; queues on several databases get one set "
            "of threads, listener, leases, reaper and retention per database).",
        )
        parser.add_argument("--supervised-by", type=int, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            self._run(opts)
        except CommandError as exc:
            # Every error raised here is about the configuration: the supervisor of --processes
            # (and systemd's RestartPreventExitStatus=78) must not restart into it again. All
            # but a database that did not answer within RUNNERQ['STARTUP_WAIT_SECONDS']: an
            # outage, which a restart may well outlast.
            if exc.returncode != EX_UNAVAILABLE:
                exc.returncode = EX_CONFIG
            raise

    @one_line_errors
    def _run(self, opts: Options) -> None:
        from django.db import connections

        self.start_logging(opts)
        if opts["database"]:
            aliases = [opts["database"]]
        else:
            wanted = _csv_list(opts["queues"]) or list(conf.runnerq_settings().queues)
            aliases = routing.databases(wanted)
        # An unknown one is reported with the other options.
        known_aliases = [alias for alias in aliases if alias in connections]
        for alias in known_aliases:
            wait_for_database(alias, tables=False)
        self.migrate_if_asked(opts)
        # Like runserver: refuse to start on a bad RUNNERQ setting or job declaration, before any
        # work (and before any child of --processes is started).
        self.check(tags=["runnerq"])
        for module in opts["imports"]:
            try:
                import_module(module)
            except ImportError as exc:
                raise CommandError(f"--import {module}: {exc}") from None
        options = self._options(opts)  # a mistake in the options is named before the tables are
        for alias in known_aliases:
            wait_for_database(alias)
        if opts["verbosity"] and not opts["supervised_by"]:
            self.stdout.write(self._banner(options, opts["processes"]))
            self.stdout.flush()
        if opts["processes"] > 1:
            return self._supervise(opts)
        if opts["metrics_port"]:
            port = opts["metrics_port"] + int(os.environ.get("RUNNERQ_WORKER_INDEX", "0"))
            address = opts["metrics_address"] or METRICS_ADDRESS
            try:
                metrics.serve(port, address)
            except OSError as exc:
                raise CommandError(
                    f"--metrics-port: can't serve metrics on {address} port {port}: {exc}"
                ) from None
        from runnerq_django.worker.runtime import WorkerConfigurationError, build_worker

        try:
            worker = build_worker(options)
        except WorkerConfigurationError as exc:
            raise CommandError(str(exc)) from None
        if opts["supervised_by"]:
            _stop_when_orphaned(worker, opts["supervised_by"])
        code = worker.run()
        if code:
            raise SystemExit(code)

    def _options(self, opts: Options) -> WorkerOptions:
        """The worker's options, every one checked: the parent of --processes calls this before it
        starts any child, so a mistake is one clear error instead of children failing in a loop."""
        from django.db import connections

        from runnerq_django.activities import arguments
        from runnerq_django.activities.registry import registry
        from runnerq_django.worker.options import WorkerOptions
        from runnerq_django.worker.runtime import WorkerConfigurationError, resolve_types

        options = WorkerOptions()
        queues = _csv_list(opts["queues"])
        if queues:
            try:
                options.queues = [arguments.queue_name(queue) for queue in queues]
            except arguments.InvalidArgument as exc:
                raise CommandError(f"--{exc.message}") from None
        options.activity_types = _csv_list(opts["activity_types"])
        try:
            resolve_types(registry, options.activity_types)
        except WorkerConfigurationError as exc:
            raise CommandError(str(exc)) from None
        for name in (
            "concurrency",
            "lease_seconds",
            "shutdown_grace_seconds",
            "poll_interval_seconds",
            "listen",
            "max_activities",
            "max_memory_mb",
        ):
            if opts[name] is not None:
                setattr(options, name, opts[name])
        lease_low, lease_high = limits(LEASE)
        if not lease_low <= options.lease_seconds <= lease_high:
            raise CommandError(
                f"--lease must be {lease_low:g}..{lease_high:g} seconds, got {options.lease_seconds:g}"
            )
        options.maintenance = opts["maintenance"]
        options.until_idle = opts["until_idle"]
        if options.until_idle and opts["processes"] > 1:
            raise CommandError(
                "--until-idle runs one worker process; drop --processes or run several with cron"
            )
        options.scheduler = opts["scheduler"]
        if opts["database"]:
            options.database = opts["database"]
            configured = list(connections.settings)
            if options.database not in configured:
                raise CommandError(
                    f"--database: unknown database alias {options.database!r} "
                    f"(DATABASES has: {', '.join(configured)})"
                )
            if "postgresql" not in connections.settings[options.database]["ENGINE"]:
                raise CommandError(f"--database: {options.database!r} is not a PostgreSQL database")
        port = opts["metrics_port"]
        if port is None and opts["metrics_address"] is not None:
            raise CommandError("--metrics-address needs --metrics-port (the port to serve the metrics on)")
        if port is not None:
            last = port + opts["processes"] - 1
            if not 1 <= port <= 65535:
                raise CommandError(f"--metrics-port must be 1..65535, got {port}")
            if last > 65535:
                raise CommandError(
                    f"--metrics-port {port} with --processes {opts['processes']} would need ports "
                    f"up to {last}; the last port is 65535"
                )
            if find_spec("prometheus_client") is None:
                raise CommandError(
                    "--metrics-port needs prometheus-client (pip install 'runnerq-django[prometheus]')"
                )
        return options

    @staticmethod
    def _banner(options: WorkerOptions, processes: int) -> str:
        """What the worker is about to do and how it stops, for whoever started it by hand."""
        workers = (
            f"{processes} processes x {options.concurrency}" if processes > 1 else f"{options.concurrency}"
        )
        until = ", until nothing is due or running" if options.until_idle else ""
        grouped = routing.by_database(options.queues, options.database)
        where = (
            f"queue(s) {', '.join(options.queues)}"
            if len(grouped) == 1
            else "; ".join(
                f"database {alias!r}: queue(s) {', '.join(queues)}" for alias, queues in grouped.items()
            )
        )
        per = " per database" if len(grouped) > 1 else ""
        return (
            f"runworker: serving {where} with {workers} thread(s){per}{until}. "
            f"Ctrl-C or SIGTERM stops it gracefully (a second one at once)."
        )

    def _supervise(self, opts: Options) -> None:
        from runnerq_django.worker.runtime import start_scheduler
        from runnerq_django.worker.supervisor import Supervisor

        child = self._child_args(opts)
        stop = threading.Event()
        scheduler = start_scheduler(stop) if opts["scheduler"] else None
        supervisor = Supervisor([child] * opts["processes"], on_stop=stop)
        code = supervisor.run()
        stop.set()
        if scheduler is not None:
            scheduler.join(5.0)
        if supervisor.gave_up is not None:
            self.stderr.write(
                f"runworker: {supervisor.gave_up} (its own error is printed above); all workers stopped"
            )
            raise SystemExit(code)
        if code:
            raise SystemExit(code)

    @staticmethod
    def _child_args(opts: Options) -> list[str]:
        """The options each child runs with: the parent's, minus what the parent did itself
        (--migrate, --scheduler, --processes)."""
        args = ["--processes", "1", "--log-format", opts["log_format"], "-v", str(opts["verbosity"])]
        for flag, key in (
            ("--queue", "queues"),
            ("--activity-type", "activity_types"),
            ("--import", "imports"),
        ):
            for value in opts[key] or []:
                args += [flag, value]
        for flag, key in (
            ("--concurrency", "concurrency"),
            ("--lease", "lease_seconds"),
            ("--shutdown-grace", "shutdown_grace_seconds"),
            ("--poll-interval", "poll_interval_seconds"),
            ("--max-activities-per-process", "max_activities"),
            ("--max-memory-per-process", "max_memory_mb"),
            ("--metrics-port", "metrics_port"),
            ("--metrics-address", "metrics_address"),
            ("--database", "database"),
        ):
            if opts[key] is not None:
                args += [flag, str(opts[key])]
        if opts["listen"] is False:
            args.append("--no-listen")
        if not opts["maintenance"]:
            args.append("--no-maintenance")
        if opts.get("settings"):
            args += ["--settings", opts["settings"]]
        if opts.get("pythonpath"):
            args += ["--pythonpath", opts["pythonpath"]]
        return args


def _stop_when_orphaned(worker: Worker | MultiDatabaseWorker, parent_pid: int) -> None:
    """A supervised child drains when its parent is gone (killed -9, say) instead of running on
    unsupervised."""

    def watch() -> None:
        while not worker.draining.wait(1.0):
            if os.getppid() != parent_pid:
                worker.request_stop("supervisor exited")
                return

    threading.Thread(target=watch, name="runnerq-orphan-watch", daemon=True).start()
