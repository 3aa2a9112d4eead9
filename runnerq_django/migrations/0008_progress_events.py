"""Progress and published events of running activities (``ctx.progress()``, ``ctx.publish()``):
the app's own tables, never columns on the spec's (a Go or TypeScript worker neither reads nor
needs them). A progress row is updated a few times a second while its activity runs: no indexed
column changes, so with room left on its page (fillfactor 70) the update is HOT."""

from django.db import migrations, models

import runnerq_django.models

PROGRESS_MODELS = ["ActivityProgress", "PublishedEvent"]


def create_progress_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit (several processes may
    migrate at once; see 0002_scheduler)."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in PROGRESS_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)
    schema_editor.execute("ALTER TABLE runnerq_progress SET (fillfactor = 70)")


def drop_progress_tables(apps, schema_editor):
    for name in reversed(PROGRESS_MODELS):
        schema_editor.delete_model(apps.get_model("runnerq_django", name))


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0007_flow_slots_fillfactor"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="ActivityProgress",
            fields=[
                ("activity_id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("done", models.FloatField(null=True)),
                ("total", models.FloatField(null=True)),
                ("message", models.TextField(null=True)),
                ("last_seq", models.BigIntegerField(db_default=0)),
                ("updated_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={"db_table": "runnerq_progress"},
        ),
        migrations.CreateModel(
            name="PublishedEvent",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "activity_id", "seq", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("activity_id", models.UUIDField()),
                ("seq", models.BigIntegerField()),
                ("queue_name", models.TextField()),
                ("name", models.TextField()),
                ("data", models.JSONField(null=True)),
                ("attempt", models.IntegerField()),
                ("created_at", models.DateTimeField(db_default=runnerq_django.models.DbNow())),
            ],
            options={"db_table": "runnerq_published_events"},
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_progress_tables, drop_progress_tables, elidable=False),
    ]
