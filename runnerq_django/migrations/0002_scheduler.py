"""The periodic scheduler's tables (lease, occurrence guard, repair counters), the sequence its
fencing tokens come from, and the cache table of the scheduler's cache alias when that alias is
Django's database cache (the test project's fallback when no Redis is configured)."""

from django.db import migrations, models

import runnerq_django.models

SCHEDULER_MODELS = ["PeriodicLease", "PeriodicRepairCount", "PeriodicOccurrence"]
# The scheduler's cache alias is RUNNERQ['SCHEDULER']['CACHE'], this by default (conf.py's rule).
# Read here rather than through the scheduler: a migration imports nothing above the schema.
DEFAULT_SCHEDULER_CACHE = "runnerq_scheduler"
DATABASE_CACHE = "django.core.cache.backends.db.DatabaseCache"


def create_cache_table(database):
    """``createcachetable`` for the scheduler's cache alias alone, when it is a database cache."""
    from django.conf import settings
    from django.core.management import call_command

    scheduler = {
        "CACHE": DEFAULT_SCHEDULER_CACHE,
        **(getattr(settings, "RUNNERQ", None) or {}).get("SCHEDULER", {}),
    }
    config = settings.CACHES.get(scheduler["CACHE"])
    if config and config.get("BACKEND") == DATABASE_CACHE:
        call_command("createcachetable", config["LOCATION"], database=database, verbosity=0)


def create_scheduler_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit, so that several processes
    migrating at once neither fail on "already exists" nor race each other."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in SCHEDULER_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)
    # Tokens never repeat, even when a lease row is deleted and created again.
    schema_editor.execute("CREATE SEQUENCE IF NOT EXISTS runnerq_periodic_lease_token_seq")
    create_cache_table(connection.alias)


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0001_initial"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="PeriodicLease",
            fields=[
                ("namespace", models.TextField(primary_key=True, serialize=False)),
                ("owner", models.TextField(help_text="Node id of the owner (host:pid:random).")),
                (
                    "release",
                    models.BigIntegerField(
                        default=0, help_text="Deploy precedence: a higher release takes over."
                    ),
                ),
                (
                    "token",
                    models.BigIntegerField(help_text="Fencing token, bumped on every change of owner."),
                ),
                ("acquired_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("renewed_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "db_table": "runnerq_periodic_lease",
            },
        ),
        migrations.CreateModel(
            name="PeriodicRepairCount",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "namespace",
                        "job_id",
                        "reason",
                        "day",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("namespace", models.TextField()),
                ("job_id", models.TextField()),
                ("reason", models.TextField()),
                ("day", models.DateField()),
                ("count", models.BigIntegerField(default=0)),
                ("last_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_periodic_repairs",
            },
        ),
        migrations.CreateModel(
            name="PeriodicOccurrence",
            fields=[
                ("idempotency_key", models.TextField(primary_key=True, serialize=False)),
                ("namespace", models.TextField()),
                ("job_id", models.TextField()),
                ("occurrence", models.DateTimeField(help_text="The nominal occurrence instant (UTC).")),
                ("activity_id", models.UUIDField(blank=True, null=True)),
                (
                    "task_id",
                    models.TextField(blank=True, help_text="Celery task id (beat entries).", null=True),
                ),
                ("node", models.TextField()),
                (
                    "token",
                    models.BigIntegerField(blank=True, help_text="Fencing token of the enqueuer.", null=True),
                ),
                ("enqueued_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                (
                    "sent_at",
                    models.DateTimeField(
                        blank=True, help_text="Celery beat: when the broker took it.", null=True
                    ),
                ),
            ],
            options={
                "db_table": "runnerq_periodic_occurrences",
                "indexes": [
                    runnerq_django.models.PgIndex(
                        fields=["namespace", "job_id", "-occurrence"], name="runnerq_periodic_occ_job"
                    )
                ],
            },
        ),
    ]

    # The models enter the state first (no DDL), so that the RunPython after them sees them.
    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_scheduler_tables, migrations.RunPython.noop, elidable=False),
    ]
