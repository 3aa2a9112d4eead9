"""Rate limits' own table: the starts of each rate-limited type per window. Not part of
the RunnerQ catalog; other SDKs neither read nor need it."""

from django.db import migrations, models


def create_rate_table(apps, schema_editor):
    """Create it if missing, under the schema lock held to commit (as 0002 to 0004 do)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    model = apps.get_model("runnerq_django", "FlowRateSlot")
    if model._meta.db_table not in set(connection.introspection.table_names()):
        schema_editor.create_model(model)


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0004_flow_limits"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="FlowRateSlot",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "activity_type",
                        "partition_key",
                        "window_id",
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
                (
                    "window_id",
                    models.BigIntegerField(help_text="floor(epoch seconds / period) on the database clock."),
                ),
                ("slot", models.IntegerField()),
                ("activity_id", models.UUIDField()),
            ],
            options={
                "db_table": "runnerq_flow_rate_slots",
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_rate_table, migrations.RunPython.noop, elidable=False),
    ]
