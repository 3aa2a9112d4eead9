"""Flow control's own tables: paused queues and types, and the ledger of every pause and
resume. Not part of the RunnerQ catalog; other SDKs neither read nor need them."""

from django.db import migrations, models

import runnerq_django.models

FLOW_MODELS = ["FlowPause", "FlowLedger"]


def create_flow_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit, so that several processes
    migrating at once neither fail on "already exists" nor race each other (as 0002 does)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in FLOW_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0002_scheduler"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="FlowPause",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "activity_type",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                (
                    "activity_type",
                    models.TextField(blank=True, help_text="Empty: the whole queue is paused."),
                ),
                (
                    "paused_by",
                    models.TextField(help_text="Who paused it (an admin user, a command, the API's caller)."),
                ),
                ("reason", models.TextField(blank=True)),
                ("paused_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_flow_pauses",
            },
        ),
        migrations.CreateModel(
            name="FlowLedger",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("action", models.TextField()),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField(blank=True)),
                ("actor", models.TextField()),
                ("reason", models.TextField(blank=True)),
                ("detail", models.JSONField(default=dict)),
                ("at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={
                "db_table": "runnerq_flow_ledger",
                "indexes": [runnerq_django.models.PgIndex(fields=["-at"], name="runnerq_flow_ledger_at")],
            },
        ),
    ]

    # The models enter the state first (no DDL), so that the RunPython after them sees them.
    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_flow_tables, migrations.RunPython.noop, elidable=False),
    ]
