"""The RunnerQ lean schema (spec 0.8).

The state operations are what ``makemigrations`` derives from the models. The database side is
the spec's migration procedure (``runnerq_django.schema.migrator``): it creates nothing that already
exists, so it cooperates with a database that a Go or TypeScript RunnerQ SDK (or an older
version) set up, moves the retired payload column, builds the indexes with the spec's own DDL
(concurrently where the spec says so, hence ``atomic = False``; the models declare the same
indexes, ``tests/schema/test_models_agree.py``), and runs no DDL at all when the catalog already
matches. Reversing it leaves the tables: other workers may share them.
"""

import django.db.models.functions.comparison
from django.db import migrations, models

import runnerq_django.models


def apply_spec_schema(apps, schema_editor):
    from runnerq_django.schema.migrator import migrate_schema

    migrate_schema(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    atomic = False

    dependencies = []

    state_operations = [
        migrations.CreateModel(
            name="Idempotency",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "idempotency_key",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("idempotency_key", models.TextField()),
                ("activity_id", models.UUIDField()),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("updated_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "verbose_name_plural": "idempotency keys",
                "db_table": "runnerq_idempotency",
            },
        ),
        migrations.CreateModel(
            name="Input",
            fields=[
                ("activity_id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("payload", models.JSONField()),
                ("serialization", models.TextField(db_default="json-v1")),
            ],
            options={
                "db_table": "runnerq_inputs",
            },
        ),
        migrations.CreateModel(
            name="Activity",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField()),
                ("priority", models.IntegerField(db_default=1)),
                (
                    "status",
                    runnerq_django.models.StatusField(
                        choices=[
                            ("pending", "Pending"),
                            ("scheduled", "Scheduled"),
                            ("retrying", "Retrying"),
                            ("processing", "Processing"),
                            ("waiting", "Waiting"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                            ("dead_letter", "Dead Letter"),
                            ("cancelled", "Cancelled"),
                        ],
                        db_default="pending",
                    ),
                ),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("scheduled_at", models.DateTimeField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "lease_deadline_ms",
                    models.BigIntegerField(blank=True, help_text="Epoch milliseconds.", null=True),
                ),
                (
                    "current_worker_id",
                    models.TextField(blank=True, help_text="The live claim token.", null=True),
                ),
                (
                    "last_worker_id",
                    models.TextField(blank=True, help_text="The last claim token.", null=True),
                ),
                ("retry_count", models.IntegerField(db_default=0)),
                (
                    "max_retries",
                    models.IntegerField(db_default=0, help_text="Attempt limit; 0 means unlimited."),
                ),
                ("timeout_seconds", models.BigIntegerField(db_default=300)),
                ("retry_delay_seconds", models.BigIntegerField(db_default=60)),
                (
                    "max_retry_delay_seconds",
                    models.BigIntegerField(db_default=0, help_text="0 means the 3600 s cap."),
                ),
                ("last_error", models.TextField(blank=True, null=True)),
                ("last_error_at", models.DateTimeField(blank=True, null=True)),
                ("metadata", models.JSONField(blank=True, null=True)),
                ("idempotency_key", models.TextField(blank=True, null=True)),
                ("parent_activity_id", models.UUIDField(blank=True, null=True)),
                ("root_activity_id", models.UUIDField(blank=True, null=True)),
                ("depth", models.SmallIntegerField(db_default=0)),
                ("waiting_result_id", models.UUIDField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "activities",
                "db_table": "runnerq_activities",
                "permissions": [("operate_activity", "Can retry, cancel, redrive and reschedule activities")],
                "indexes": [
                    runnerq_django.models.PgIndex(
                        models.F("queue_name"),
                        models.F("activity_type"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.OrderBy(models.F("retry_count"), descending=True),
                        django.db.models.functions.comparison.Coalesce("scheduled_at", "created_at"),
                        condition=models.Q(("status__in", ["pending", "scheduled", "retrying", "waiting"])),
                        name="idx_runnerq_dequeue_effective_v2",
                    ),
                    runnerq_django.models.PgIndex(
                        models.F("queue_name"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.OrderBy(models.F("retry_count"), descending=True),
                        django.db.models.functions.comparison.Coalesce("scheduled_at", "created_at"),
                        condition=models.Q(("status__in", ["pending", "scheduled", "retrying", "waiting"])),
                        name="idx_runnerq_dequeue_order_v2",
                    ),
                    runnerq_django.models.PgIndex(
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="idx_runnerq_query_created",
                    ),
                    runnerq_django.models.PgIndex(
                        models.F("status"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status__ne", "completed")),
                        name="idx_runnerq_query_status",
                    ),
                    runnerq_django.models.PgIndex(
                        condition=models.Q(("status", "processing")),
                        fields=["queue_name"],
                        name="idx_runnerq_processing",
                    ),
                    runnerq_django.models.PgIndex(
                        condition=models.Q(("parent_activity_id__isnull", False)),
                        fields=["root_activity_id"],
                        name="idx_runnerq_root_children",
                    ),
                    runnerq_django.models.PgIndex(
                        condition=models.Q(
                            ("parent_activity_id__isnull", True),
                            ("status__in", ["completed", "failed", "dead_letter", "cancelled"]),
                        ),
                        fields=["queue_name", "status", "completed_at"],
                        name="idx_runnerq_root_terminal",
                    ),
                    runnerq_django.models.PgIndex(
                        condition=models.Q(("parent_activity_id__isnull", False)),
                        fields=["parent_activity_id"],
                        name="idx_runnerq_parent_id",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Command",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "command_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("command_id", models.TextField()),
                ("fingerprint", models.TextField()),
                ("kind", models.TextField()),
                ("result", models.JSONField()),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_commands",
                "indexes": [
                    runnerq_django.models.PgIndex(fields=["created_at"], name="idx_runnerq_commands_created")
                ],
            },
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "waiter_activity_id",
                        "result_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("waiter_activity_id", models.UUIDField()),
                ("result_id", models.UUIDField()),
                ("producer_activity_id", models.UUIDField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "verbose_name_plural": "dependencies",
                "db_table": "runnerq_dependencies",
                "indexes": [
                    runnerq_django.models.PgIndex(
                        fields=["queue_name", "result_id"], name="idx_runnerq_dependencies_result"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("activity_id", models.UUIDField()),
                ("queue_name", models.TextField()),
                ("event_type", models.TextField()),
                ("worker_id", models.TextField(blank=True, null=True)),
                ("detail", models.JSONField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_events",
                "indexes": [
                    runnerq_django.models.PgIndex(
                        models.F("activity_id"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        name="idx_runnerq_events_activity",
                    ),
                    runnerq_django.models.PgIndex(
                        fields=["queue_name", "id"], name="idx_runnerq_events_queue_seq"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Result",
            fields=[
                (
                    "activity_id",
                    models.UUIDField(
                        help_text="An activity id, or a checkpoint/signal UUIDv5.",
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("state", models.TextField(help_text='"Ok" or "Err".')),
                ("data", models.JSONField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("owner_activity_id", models.UUIDField(blank=True, null=True)),
                (
                    "step",
                    models.TextField(
                        blank=True, help_text='"kind:name"; NULL for an activity\'s own result.', null=True
                    ),
                ),
                ("serialization", models.TextField(db_default="json-v1")),
            ],
            options={
                "db_table": "runnerq_results",
                "indexes": [
                    runnerq_django.models.PgIndex(
                        condition=models.Q(("owner_activity_id__isnull", False)),
                        fields=["owner_activity_id"],
                        name="idx_runnerq_results_by_owner",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="WorkerPool",
            fields=[
                ("pool_id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("max_workers", models.IntegerField()),
                ("activity_types", runnerq_django.models.TextArrayField(blank=True, null=True)),
                ("started_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("last_seen_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_worker_pools",
                "indexes": [
                    runnerq_django.models.PgIndex(
                        fields=["queue_name", "last_seen_at"], name="idx_runnerq_worker_pools_queue_alive"
                    )
                ],
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=state_operations,
            database_operations=[
                migrations.RunPython(apply_spec_schema, migrations.RunPython.noop, elidable=False)
            ],
        )
    ]
