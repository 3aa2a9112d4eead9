"""Concurrency limits' own tables: the partition key of each limited activity, and the
slots in use. Not part of the RunnerQ catalog; other SDKs neither read nor need them."""

from django.db import migrations, models

import runnerq_django.models

LIMIT_MODELS = ["FlowPartition", "FlowSlot"]


def create_limit_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit (as 0002 and 0003 do)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in LIMIT_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0003_flow_control"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="FlowPartition",
            fields=[
                ("activity_id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField()),
                ("partition_key", models.TextField()),
            ],
            options={
                "db_table": "runnerq_flow_partitions",
            },
        ),
        migrations.CreateModel(
            name="FlowSlot",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "activity_type",
                        "partition_key",
                        "slot",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField()),
                ("partition_key", models.TextField(blank=True)),
                ("slot", models.IntegerField()),
                ("activity_id", models.UUIDField()),
                ("token", models.TextField()),
                ("taken_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_flow_slots",
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_limit_tables, migrations.RunPython.noop, elidable=False),
    ]
