"""System checks of runnerq_django (errors at ``check``/``migrate`` time, not at run time).

- runnerq.E001 the RUNNERQ setting       - runnerq.E010/W010/E011 the live schema (database check)
- runnerq.E101 duplicate job id          - runnerq.E102 invalid job declaration (id, cron, tz,
- runnerq.E103 scheduler cache alias       interval anchor, bounds, target, options)
  missing (only when jobs are declared)  - runnerq.W101 misfire grace under 5 s
- runnerq.E104 a cache backend the       - runnerq.W103 a process-local cache (locmem/dummy)
  scheduler would have to unpickle       - runnerq.W104 orphaned progress (database check):
- runnerq.E105 a cache backend that        occurrences of a job id no longer declared
  can't be loaded (a missing extra)      - runnerq.W002 IMMEDIATE on with DEBUG off (--deploy)

The scheduler's checks (the E1xx and W1xx) live with the scheduler, in
``runnerq_django.scheduler.checks``: this module, in the plumbing layer, imports nothing above it.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core import checks

if TYPE_CHECKING:
    from django.apps import AppConfig


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

    from runnerq_django.schema import compare as schema

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
