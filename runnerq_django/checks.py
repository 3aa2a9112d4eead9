"""System checks of runnerq_django: the RUNNERQ setting and the live schema.

Internal: not part of the public API.
"""

from django.core import checks


@checks.register("runnerq")
def check_settings(app_configs, **kwargs):
    from runnerq_django import conf

    return [checks.Error(message, id="runnerq.E001") for message in conf.validate()]


@checks.register(checks.Tags.database)
def check_schema(app_configs, databases=None, **kwargs):
    """The live RunnerQ tables against the spec's catalog (``check --database <alias>`` only).

    Silent until this app's migrations are applied: ``migrate`` runs the database checks before
    it migrates, and a fresh database is not an error then. Differences are errors, except a
    leftover retired index, which only costs writes (a warning).
    """
    from django.db import DatabaseError, connections
    from django.db.migrations.recorder import MigrationRecorder

    from runnerq_django import conf, schema

    alias = conf.database_alias()
    if not databases or alias not in databases or alias not in connections:
        return []
    connection = connections[alias]
    hint = ("`python manage.py runnerq_schema migrate` runs the spec's migration procedure, which repairs "
            "missing objects and retired leftovers; `runnerq_schema check` prints the full report.")
    try:
        recorder = MigrationRecorder(connection)
        applied = recorder.has_table() and recorder.migration_qs.filter(app="runnerq_django", name="0001_initial").exists()
        if not applied:
            return []
        differences = schema.check_connection(connection)
    except DatabaseError as exc:
        return [checks.Error(f"Could not read the RunnerQ schema of database {alias!r}: {exc}", id="runnerq.E011")]
    return [
        (checks.Warning if difference.tolerable else checks.Error)(
            f"RunnerQ schema of database {alias!r}: {difference}",
            hint=hint,
            id="runnerq.W010" if difference.tolerable else "runnerq.E010",
        )
        for difference in differences
    ]


from runnerq_django.scheduler import checks as _scheduler_checks  # noqa: E402,F401  (registers them)
