"""System checks of runnerq_django (errors at ``check``/``migrate`` time, not at run time).

- runnerq.E001 the RUNNERQ setting       - runnerq.E010/W010/E011 the live schema (database check)
- runnerq.E101 duplicate job id          - runnerq.E102 invalid job declaration (id, cron, tz,
- runnerq.E103 scheduler cache alias       interval anchor, bounds, target, options)
  missing (only when jobs are declared)  - runnerq.W101 misfire grace under 5 s
- runnerq.E104 a cache backend the       - runnerq.W103 a process-local cache (locmem/dummy)
  scheduler would have to unpickle       - runnerq.W104 orphaned progress (database check):
- runnerq.E105 a cache backend that        occurrences of a job id no longer declared
  can't be loaded (a missing extra)      - runnerq.W002 IMMEDIATE on with DEBUG off (--deploy)

Internal: not part of the public API.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core import checks

# The scheduler's own check, reported here too (runnerq.E103/E104/E105/W103).
from runnerq_django.scheduler.cache_check import cache_problems

if TYPE_CHECKING:
    from django.apps import AppConfig

    from runnerq_django.scheduler.declarations import PeriodicJob

MIN_SENSIBLE_GRACE = timedelta(seconds=5)
ORPHAN_LOOKBACK = timedelta(days=35)


@checks.register("runnerq")
def check_settings(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Error(message, id="runnerq.E001") for message in settings_problems()]


@checks.register("runnerq", deploy=True)
def check_immediate_mode(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``check --deploy``: immediate mode (meant for tests) left on in a production settings file."""
    from django.conf import settings

    from runnerq_django import conf

    if settings.DEBUG or settings_problems() or not conf.runnerq_settings().immediate:
        return []
    return [
        checks.Warning(
            "RUNNERQ['IMMEDIATE'] is on with DEBUG off: enqueue() runs each activity in the process "
            "that enqueues it, so handlers would run inside web requests, and no worker runs them.",
            hint="Leave RUNNERQ['IMMEDIATE'] to the test settings (or runnerq_django.testing.immediate()).",
            id="runnerq.W002",
        )
    ]


def settings_problems() -> list[str]:
    """Every problem of the ``RUNNERQ`` setting: ``conf.validate()``'s, and the queue names by
    the storage layer's rule (a bad name would otherwise surface as a claim or reap failing every
    few seconds in every worker)."""
    from runnerq_django import conf
    from runnerq_django.storage.errors import InvalidArgument
    from runnerq_django.storage.validation import queue_name

    def problem(setting: str, name: Any) -> str | None:
        try:
            queue_name(name)
        except InvalidArgument as exc:
            return f"{setting} {exc.message.removeprefix('queue: ')}"
        return None

    problems = conf.validate()
    queues = conf.get("QUEUES")
    if isinstance(queues, str) or not isinstance(queues, (list, tuple)) or not queues:
        problems.append(f"RUNNERQ['QUEUES'] must be a non-empty list of queue names, got {queues!r}")
    else:
        problems += [
            p for index, name in enumerate(queues) if (p := problem(f"RUNNERQ['QUEUES'][{index}]", name))
        ]
    if (p := problem("RUNNERQ['DEFAULT_QUEUE']", conf.get("DEFAULT_QUEUE"))) is not None:
        problems.append(p)
    routed = conf.get("QUEUE_DATABASES")
    if isinstance(routed, dict):
        problems += [
            p
            for name in routed
            if isinstance(name, str) and (p := problem(f"RUNNERQ['QUEUE_DATABASES'] key {name!r}:", name))
        ]
    return problems


@checks.register(checks.Tags.database)
def check_schema(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The live RunnerQ tables against the spec's catalog (``check --database <alias>`` only).

    Silent until this app's migrations are applied: ``migrate`` runs the database checks before
    it migrates, and a fresh database is not an error then. Differences are errors, except a
    leftover retired index, which only costs writes (a warning).
    """
    from django.db import connections

    from runnerq_django import routing

    found: list[checks.CheckMessage] = []
    for alias in routing.databases():  # every alias that hosts a queue (RUNNERQ['QUEUE_DATABASES'])
        if databases and alias in databases and alias in connections:
            found += _schema_messages(alias)
    return found


def _schema_messages(alias: str) -> list[checks.CheckMessage]:
    from django.db import DatabaseError, connections
    from django.db.migrations.recorder import MigrationRecorder

    from runnerq_django import schema

    connection = connections[alias]
    hint = (
        "`python manage.py runnerq_schema migrate` runs the spec's migration procedure, which repairs "
        "missing objects and retired leftovers; `runnerq_schema check` prints the full report."
    )
    try:
        recorder = MigrationRecorder(connection)
        applied = (
            recorder.has_table()
            and recorder.migration_qs.filter(app="runnerq_django", name="0001_initial").exists()
        )
        if not applied:
            return []
        differences = schema.check_connection(connection)
    except DatabaseError as exc:
        return [
            checks.Error(f"Could not read the RunnerQ schema of database {alias!r}: {exc}", id="runnerq.E011")
        ]
    return [
        (checks.Warning if difference.tolerable else checks.Error)(
            f"RunnerQ schema of database {alias!r}: {difference}",
            hint=hint,
            id="runnerq.W010" if difference.tolerable else "runnerq.E010",
        )
        for difference in differences
    ]


@checks.register("runnerq")
def check_declarations(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    from runnerq_django import conf
    from runnerq_django.scheduler import declarations

    if settings_problems():
        return []  # the settings check reports those first
    try:
        declared = declarations.declared_jobs()
    except Exception as exc:  # a settings JOBS entry with unknown options, an import error...
        return [checks.Error(f"Periodic job declarations could not be loaded: {exc}", id="runnerq.E102")]
    # The cache alias is needed only where jobs are declared (or a scheduler starts: the service
    # asks for cache_problems() itself), so a project without periodic jobs needs no alias.
    return declaration_errors(declared, conf.scheduler_settings().namespace) + (
        cache_problems() if declared else []
    )


def declaration_errors(declared: Sequence[PeriodicJob], namespace: str) -> list[checks.CheckMessage]:
    """The problems of a list of declarations (what ``check_declarations`` reports)."""
    from runnerq_django.scheduler import records

    errors: list[checks.CheckMessage] = []
    counts = Counter(job.id for job in declared)
    for job_id, count in sorted(counts.items()):
        if count > 1:
            origins = ", ".join(f"{j.origin}:{j.target_path()}" for j in declared if j.id == job_id)
            errors.append(
                checks.Error(
                    f"Periodic job id {job_id!r} is declared {count} times ({origins})",
                    hint="Job ids name the cache record and the idempotency keys; each must be unique.",
                    id="runnerq.E101",
                )
            )
    for job in declared:
        for problem in job.validate():
            errors.append(checks.Error(f"Periodic job {job.id!r}: {problem}", id="runnerq.E102"))
        if isinstance(job.misfire_grace, timedelta) and timedelta(0) < job.misfire_grace < MIN_SENSIBLE_GRACE:
            errors.append(
                checks.Warning(
                    f"Periodic job {job.id!r}: misfire_grace {job.misfire_grace.total_seconds():g}s is under 5 s",
                    hint="Queue and tick latency would make occurrences miss the window; use a longer grace.",
                    id="runnerq.W101",
                )
            )
        key = records.key_for(namespace, f"job:{job.id}")
        if isinstance(job.id, str) and len(_full_key(key).encode()) > 250:
            errors.append(
                checks.Error(
                    f"Periodic job {job.id!r}: its cache key is longer than 250 bytes once prefixed",
                    id="runnerq.E102",
                )
            )
    return errors


def _full_key(key: str) -> str:
    from django.conf import settings

    from runnerq_django import conf

    config = settings.CACHES.get(conf.scheduler_settings().cache, {})
    return f"{config.get('KEY_PREFIX', '')}:{config.get('VERSION', 1)}:{key}"


@checks.register(checks.Tags.database)
def check_orphaned_progress(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Occurrences enqueued recently under job ids that are no longer declared (a rename makes a
    new job: its progress does not carry over). An occurrence's guard row is on its job's queue's
    database, and a job no longer declared has no queue to look up: every database that hosts a
    queue is read (those of ``databases``)."""
    from runnerq_django import conf, routing
    from runnerq_django.scheduler import declarations
    from runnerq_django.storage import periodic as store
    from runnerq_django.storage.errors import StorageError

    if not databases or settings_problems():
        return []
    aliases = [alias for alias in routing.databases() if alias in databases]
    if not aliases:
        return []
    namespace = conf.scheduler_settings().namespace
    try:
        declared = {job.id for job in declarations.declared_jobs()}
    except Exception:
        return []  # check_declarations reports it
    latest: dict[str, datetime] = {}
    for alias in aliases:
        try:
            since = store.db_now(using=alias) - ORPHAN_LOOKBACK
            found = store.recent_job_ids(namespace, since, using=alias)
        except StorageError:
            continue  # a database that can't be read now: the others are still checked
        for job_id, last in found:
            latest[job_id] = max(last, latest.get(job_id, last))
    return [
        checks.Warning(
            f"Periodic job {job_id!r} (namespace {namespace!r}) enqueued occurrences until {last:%Y-%m-%d %H:%M}Z "
            "but is no longer declared",
            hint=(
                "If it was renamed, the new id is a new job: its progress starts from the declaration. If it was "
                "removed, nothing more is enqueued and its cache record expires by itself."
            ),
            id="runnerq.W104",
        )
        for job_id, last in sorted(latest.items())
        if job_id not in declared and not job_id.startswith("beat:")
    ]
