"""The forks' ledger (``storage.fork``): which run a fork re-runs from which step, who made it and
why. The app's own table; the fork itself is an ordinary activity with ordinary checkpoints."""

from django.db import migrations, models

import runnerq_django.models


def create_forks_table(apps, schema_editor):
    """Create it if missing, under the schema lock held to commit (see 0002_scheduler)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    model = apps.get_model("runnerq_django", "ActivityFork")
    if model._meta.db_table not in set(connection.introspection.table_names()):
        schema_editor.create_model(model)


def drop_forks_table(apps, schema_editor):
    schema_editor.delete_model(apps.get_model("runnerq_django", "ActivityFork"))


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0008_progress_events"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="ActivityFork",
            fields=[
                ("fork_id", models.UUIDField(primary_key=True, serialize=False)),
                ("origin_id", models.UUIDField(db_index=True)),
                ("queue_name", models.TextField()),
                ("from_step", models.TextField()),
                ("copied", models.IntegerField()),
                ("reused_children", models.IntegerField()),
                ("actor", models.TextField(blank=True)),
                ("reason", models.TextField(null=True)),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={"db_table": "runnerq_forks"},
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_forks_table, drop_forks_table, elidable=False),
    ]
