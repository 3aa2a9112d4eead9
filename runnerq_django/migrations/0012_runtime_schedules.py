"""Runtime schedules: periodic jobs kept in Postgres (``runnerq_schedules``) and their history
(``runnerq_schedule_changes``). The app's own tables; other SDKs neither read nor need them.

The triggers keep ``revision``, ``change_seq`` and ``timing_changed_at`` (see
``runnerq_django.models``) whoever writes the row, and announce every change on the
``runnerq_schedules`` channel (a scheduler that listens wakes at once; one that does not sees the
change at its next tick through ``(count(*), max(change_seq))``)."""

from django.db import migrations, models
from django.db.models.functions import Now

SCHEDULE_MODELS = ["RuntimeSchedule", "ScheduleChange"]

# Columns the database keeps itself, or that counting occurrences moves: no revision for those.
BOOKKEEPING = (
    "ARRAY['revision', 'change_seq', 'timing_changed_at', 'updated_at', 'updated_by', 'occurrence_count']"
)
TIMING = "ARRAY['kind', 'cron', 'tz', 'every_seconds', 'anchor', 'at', 'start_at', 'end_at']"

TRIGGERS = f"""
CREATE SEQUENCE IF NOT EXISTS runnerq_schedules_change_seq;

CREATE OR REPLACE FUNCTION runnerq_schedules_revise() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_fields jsonb;
    new_fields jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.revision := 1;
        NEW.change_seq := nextval('runnerq_schedules_change_seq');
        NEW.timing_changed_at := now();
        NEW.created_at := now();
        NEW.updated_at := now();
        RETURN NEW;
    END IF;
    old_fields := to_jsonb(OLD) - {BOOKKEEPING};
    new_fields := to_jsonb(NEW) - {BOOKKEEPING};
    IF new_fields IS DISTINCT FROM old_fields THEN
        NEW.revision := OLD.revision + 1;
        NEW.change_seq := nextval('runnerq_schedules_change_seq');
        NEW.updated_at := now();
        IF (SELECT jsonb_object_agg(k, to_jsonb(NEW) -> k) FROM unnest({TIMING}) k)
           IS DISTINCT FROM (SELECT jsonb_object_agg(k, to_jsonb(OLD) -> k) FROM unnest({TIMING}) k) THEN
            NEW.timing_changed_at := now();
        ELSE
            NEW.timing_changed_at := OLD.timing_changed_at;
        END IF;
    ELSE
        NEW.revision := OLD.revision;
        NEW.change_seq := OLD.change_seq;
        NEW.timing_changed_at := OLD.timing_changed_at;
        NEW.updated_at := OLD.updated_at;
    END IF;
    NEW.created_at := OLD.created_at;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION runnerq_schedules_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('runnerq_schedules', TG_OP);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS runnerq_schedules_revise ON runnerq_schedules;
CREATE TRIGGER runnerq_schedules_revise BEFORE INSERT OR UPDATE ON runnerq_schedules
    FOR EACH ROW EXECUTE FUNCTION runnerq_schedules_revise();
DROP TRIGGER IF EXISTS runnerq_schedules_notify ON runnerq_schedules;
CREATE TRIGGER runnerq_schedules_notify AFTER INSERT OR UPDATE OR DELETE ON runnerq_schedules
    FOR EACH STATEMENT EXECUTE FUNCTION runnerq_schedules_notify();
"""

DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS runnerq_schedules_notify ON runnerq_schedules;
DROP TRIGGER IF EXISTS runnerq_schedules_revise ON runnerq_schedules;
DROP FUNCTION IF EXISTS runnerq_schedules_notify();
DROP FUNCTION IF EXISTS runnerq_schedules_revise();
DROP SEQUENCE IF EXISTS runnerq_schedules_change_seq;
"""


def create_schedule_tables(apps, schema_editor):
    """Create what is missing, under the schema lock held to commit (several processes may
    migrate at once; see 0002_scheduler), then (re)create the triggers."""
    from runnerq_django.schema.migrator import hold_schema_lock_until_commit

    connection = schema_editor.connection
    hold_schema_lock_until_commit(connection)
    existing = set(connection.introspection.table_names())
    for name in SCHEDULE_MODELS:
        model = apps.get_model("runnerq_django", name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)
    schema_editor.execute(TRIGGERS)


def drop_schedule_tables(apps, schema_editor):
    schema_editor.execute(DROP_TRIGGERS)
    for name in reversed(SCHEDULE_MODELS):
        schema_editor.delete_model(apps.get_model("runnerq_django", name))


class Migration(migrations.Migration):
    dependencies = [
        ("runnerq_django", "0011_debounce"),
    ]

    state_operations = [
        migrations.CreateModel(
            name="RuntimeSchedule",
            fields=[
                (
                    "id",
                    models.TextField(
                        help_text="Stable id; shares the namespace of declared jobs.",
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("activity", models.TextField(help_text="The activity type each occurrence enqueues.")),
                (
                    "payload",
                    models.JSONField(
                        blank=True, help_text="The JSON payload of every occurrence.", null=True
                    ),
                ),
                (
                    "queue",
                    models.TextField(
                        blank=True, help_text="Empty: the handler's queue, else the default.", null=True
                    ),
                ),
                (
                    "priority",
                    models.SmallIntegerField(blank=True, help_text="1..4; empty: the handler's.", null=True),
                ),
                (
                    "kind",
                    models.TextField(
                        choices=[("cron", "cron"), ("interval", "interval"), ("once", "once")], default="cron"
                    ),
                ),
                ("cron", models.TextField(blank=True, default="", help_text="croniter syntax (kind cron).")),
                ("tz", models.TextField(default="UTC", help_text="IANA time zone of the cron expression.")),
                (
                    "every_seconds",
                    models.BigIntegerField(blank=True, help_text="Period (kind interval).", null=True),
                ),
                (
                    "anchor",
                    models.DateTimeField(
                        blank=True,
                        help_text="Interval anchor: occurrences are anchor + k x every (default the epoch).",
                        null=True,
                    ),
                ),
                ("at", models.DateTimeField(blank=True, help_text="The one instant (kind once).", null=True)),
                ("start_at", models.DateTimeField(blank=True, null=True)),
                ("end_at", models.DateTimeField(blank=True, null=True)),
                (
                    "enabled",
                    models.BooleanField(default=True, help_text="Off: paused (occurrences are held)."),
                ),
                ("misfire_grace_seconds", models.BigIntegerField(default=3600)),
                ("coalesce", models.BooleanField(default=True)),
                ("max_catch_up", models.IntegerField(default=10)),
                ("catch_up_after_repair", models.BooleanField(default=True)),
                (
                    "jitter_seconds",
                    models.IntegerField(
                        default=0,
                        help_text="Each occurrence runs up to this many seconds late (the same delay everywhere).",
                    ),
                ),
                (
                    "max_occurrences",
                    models.BigIntegerField(
                        blank=True,
                        help_text="Stop after this many enqueued occurrences (empty: no cap).",
                        null=True,
                    ),
                ),
                (
                    "occurrence_count",
                    models.BigIntegerField(default=0, help_text="Occurrences enqueued so far."),
                ),
                ("description", models.TextField(blank=True, default="")),
                (
                    "revision",
                    models.BigIntegerField(default=1, help_text="Bumped by every change (by the database)."),
                ),
                ("change_seq", models.BigIntegerField(default=0)),
                ("timing_changed_at", models.DateTimeField(db_default=Now())),
                ("created_at", models.DateTimeField(db_default=Now())),
                ("updated_at", models.DateTimeField(db_default=Now())),
                ("created_by", models.TextField(blank=True, default="")),
                ("updated_by", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "schedule",
                "db_table": "runnerq_schedules",
                "indexes": [models.Index(fields=["change_seq"], name="runnerq_schedules_seq")],
            },
        ),
        migrations.CreateModel(
            name="ScheduleChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("schedule_id", models.TextField()),
                ("revision", models.BigIntegerField(blank=True, null=True)),
                ("action", models.TextField()),
                ("actor", models.TextField()),
                ("reason", models.TextField(blank=True, default="")),
                ("changes", models.JSONField(default=dict)),
                ("activity_id", models.UUIDField(blank=True, null=True)),
                ("at", models.DateTimeField(db_default=Now())),
            ],
            options={
                "db_table": "runnerq_schedule_changes",
                "indexes": [models.Index(fields=["schedule_id", "-at"], name="runnerq_schedule_changes_id")],
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
        migrations.RunPython(create_schedule_tables, drop_schedule_tables, elidable=False),
    ]
