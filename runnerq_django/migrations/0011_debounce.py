"""Debounce and throttle windows (``enqueue(..., debounce=...)``, ``throttle=...``): the app's own
table ``runnerq_debounce``, one row per key. Not part of the RunnerQ catalog; other SDKs neither
read nor need it. (Numbered 0011: the lead chains it after the migrations merged before it.)"""

from django.db import migrations, models


def create_debounce_table(apps, schema_editor):
    """Create it if missing, under the schema lock held to commit (as 0002 to 0006 do)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    model = apps.get_model("runnerq_django", "DebounceWindow")
    if model._meta.db_table not in set(connection.introspection.table_names()):
        schema_editor.create_model(model)


def drop_debounce_table(apps, schema_editor):
    schema_editor.execute("DROP TABLE IF EXISTS runnerq_debounce")


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0010_vacuum_settings"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="DebounceWindow",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue_name",
                        "activity_type",
                        "kind",
                        "key",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue_name", models.TextField()),
                ("activity_type", models.TextField()),
                ("kind", models.TextField(help_text="'debounce' or 'throttle'.")),
                ("key", models.TextField()),
                (
                    "activity_id",
                    models.UUIDField(help_text="The activity that runs for the key's current window."),
                ),
                (
                    "first_at",
                    models.DateTimeField(help_text="The first enqueue of the current group or window."),
                ),
                ("last_at", models.DateTimeField(help_text="The last enqueue.")),
                (
                    "run_at",
                    models.DateTimeField(help_text="When the activity runs (a throttle's window starts)."),
                ),
                ("wait_ms", models.BigIntegerField(help_text="A debounce's wait, a throttle's window (ms).")),
                (
                    "max_wait_ms",
                    models.BigIntegerField(blank=True, help_text="A debounce's max_wait (ms).", null=True),
                ),
                (
                    "collapsed",
                    models.BigIntegerField(
                        db_default=0,
                        help_text="Enqueues that returned this activity instead of creating one.",
                    ),
                ),
            ],
            options={
                "db_table": "runnerq_debounce",
                "indexes": [
                    models.Index(fields=["activity_id"], name="runnerq_debounce_activity"),
                    models.Index(fields=["last_at"], name="runnerq_debounce_last"),
                ],
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_debounce_table, drop_debounce_table, elidable=False),
    ]
