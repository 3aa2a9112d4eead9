"""The live console's rollup tables (per-minute outcomes and latency, queue depth samples): the
app's own tables, written by the workers' maintenance loop and read by the admin's charts."""

from django.db import migrations, models

CONSOLE_MODELS = ["ConsoleMinute", "ConsoleDepth"]


def create_console_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit (several processes may
    migrate at once; see 0002_scheduler)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in CONSOLE_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0005_flow_rates"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="ConsoleMinute",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "span_minutes",
                        "minute",
                        "queue_name",
                        "activity_type",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("span_minutes", models.SmallIntegerField(db_default=1)),
                ("minute", models.DateTimeField()),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField()),
                ("completed", models.BigIntegerField(db_default=0)),
                ("failed", models.BigIntegerField(db_default=0)),
                ("dead_lettered", models.BigIntegerField(db_default=0)),
                ("latency_count", models.BigIntegerField(db_default=0)),
                ("latency_sum_ms", models.FloatField(db_default=0)),
                ("latency_max_ms", models.FloatField(db_default=0)),
                # The latency histogram: a column per bucket (storage.sql.console).
                *[(f"latency_b{i}", models.BigIntegerField(db_default=0)) for i in range(16)],
            ],
            options={"db_table": "runnerq_console_minutes"},
        ),
        migrations.CreateModel(
            name="ConsoleDepth",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "minute", "queue_name", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("minute", models.DateTimeField()),
                ("queue_name", models.TextField()),
                ("due", models.BigIntegerField(db_default=0)),
                ("scheduled", models.BigIntegerField(db_default=0)),
                ("processing", models.BigIntegerField(db_default=0)),
                ("sampled_at", models.DateTimeField()),
            ],
            options={"db_table": "runnerq_console_depth"},
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_console_tables, migrations.RunPython.noop, elidable=False),
    ]
