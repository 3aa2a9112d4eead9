"""Batch runs (``storage.batches``): one row per call of a batch handler, naming its members and
the attempt each ran, so the admin links a batch's members to each other. The app's own table;
a Go or TypeScript worker neither reads nor needs it."""

from django.db import migrations, models

import runnerq_django.models


def create_batch_runs_table(apps, schema_editor):
    """Create it if missing, under the schema lock held to commit (see 0002_scheduler)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    model = apps.get_model("runnerq_django", "BatchRun")
    if model._meta.db_table not in set(connection.introspection.table_names()):
        schema_editor.create_model(model)
        # The members' GIN index, in SQL: a GinIndex in the model's Meta would make Django's
        # checks require django.contrib.postgres in INSTALLED_APPS (postgres.E005).
        schema_editor.execute(
            "CREATE INDEX runnerq_batch_runs_members ON runnerq_batch_runs USING gin (member_ids)"
        )


def drop_batch_runs_table(apps, schema_editor):
    schema_editor.delete_model(apps.get_model("runnerq_django", "BatchRun"))


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0012_runtime_schedules"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="BatchRun",
            fields=[
                ("batch_id", models.UUIDField(primary_key=True, serialize=False)),
                ("activity_type", models.TextField()),
                ("queue_name", models.TextField()),
                ("started_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
                ("member_ids", runnerq_django.models.UUIDArrayField()),
                ("member_attempts", runnerq_django.models.IntArrayField()),
            ],
            options={
                "db_table": "runnerq_batch_runs",
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_batch_runs_table, drop_batch_runs_table, elidable=False),
    ]
