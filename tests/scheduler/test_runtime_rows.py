"""Runtime schedules as rows: the same validation as declared jobs (same messages), the revision
the database bumps, the history, and the API's verbs. Real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from runnerq_django.models import RuntimeSchedule, ScheduleChange
from runnerq_django.scheduler import declarations
from runnerq_django.scheduler import runtime_schedules as schedules
from runnerq_django.scheduler.rows import RowJob, job_of, preview

ACTIVITY = "tests.scheduler.Tick"


def declared_problems(**options) -> list[str]:
    return declarations.make_job("x", activity=ACTIVITY, origin="test", **options).validate()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 4 * * *", "tz": "Mars/Olympus"}, "tz"),
        ({"every": timedelta(milliseconds=500)}, "every_seconds"),
        ({"every": 60, "anchor": "2030-01-01T00:00:00"}, "anchor"),
        ({"cron": "* * * * *", "payload": {1, 2}}, "payload"),
        ({"cron": "* * * * *", "payload": "x" * 2_000_000}, "payload"),
        ({"cron": "* * * * *", "queue": "bad queue!"}, "queue"),
        ({"cron": "* * * * *", "priority": 9}, "priority"),
        ({"cron": "* * * * *", "start": "2030-01-02T00:00Z", "end": "2030-01-01T00:00Z"}, "end_at"),
    ],
)
def test_rows_are_refused_for_what_declarations_are_refused_for_with_the_same_message(options, field):
    expected = declared_problems(**options)
    assert expected  # the declaration is refused ...
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        schedules.create("x", activity=ACTIVITY, **options)
    # ... and the row for the same reason, in the same words, on the field it is about.
    assert caught.value.errors == {field: expected}, caught.value.errors
    assert not RuntimeSchedule.objects.filter(pk="x").exists()


@pytest.mark.django_db
def test_row_only_rules_name_their_field():
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        schedules.create("x", activity=ACTIVITY, cron="* * * * *", jitter=-1, max_occurrences=0)
    assert set(caught.value.errors) == {"jitter_seconds", "max_occurrences"}
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        schedules.create("x", activity=ACTIVITY, at="2030-01-01T00:00:00.5Z")
    assert caught.value.errors == {"at": ["at: must be a whole second, got 2030-01-01T00:00:00Z.500000"]}
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        schedules.create("bad id!", activity=ACTIVITY, cron="* * * * *")
    assert list(caught.value.errors) == ["id"]


@pytest.mark.django_db
def test_an_id_declared_in_code_is_refused(settings):
    settings.RUNNERQ = {
        **settings.RUNNERQ,
        "SCHEDULER": {
            **settings.RUNNERQ.get("SCHEDULER", {}),
            "JOBS": {"dup.job": {"activity": ACTIVITY, "every": 60}},
        },
    }
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        schedules.create("dup.job", activity=ACTIVITY, cron="* * * * *")
    assert "declared in code" in caught.value.errors["id"][0]


@pytest.mark.django_db(transaction=True)
def test_every_change_bumps_the_revision_and_timing_changes_move_the_floor():
    row = schedules.create(
        "r1", activity=ACTIVITY, cron="0 4 * * *", tz="Europe/Paris", payload={"a": 1}, actor="test"
    )
    assert (row.revision, row.kind, row.enabled) == (1, "cron", True)
    floor = row.timing_changed_at
    row = schedules.update("r1", payload={"a": 2}, actor="test")
    assert row.revision == 2 and row.timing_changed_at == floor  # a definition change
    row = schedules.update("r1", cron="0 5 * * *", actor="test")
    assert row.revision == 3 and row.timing_changed_at > floor  # a timing change
    assert schedules.update("r1", cron="0 5 * * *").revision == 3  # no change, no revision
    # Whoever writes the row: plain SQL is revised by the database too.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runnerq_schedules SET description = 'by hand' WHERE id = 'r1'")
        cursor.execute("UPDATE runnerq_schedules SET occurrence_count = 7 WHERE id = 'r1'")  # bookkeeping
    assert schedules.get("r1").revision == 4
    row = schedules.pause("r1", actor="ops", reason="maintenance")
    assert (row.revision, row.enabled) == (5, False)
    row = schedules.resume("r1", actor="ops")
    assert (row.revision, row.enabled) == (6, True)
    with pytest.raises(schedules.RevisionConflict):
        schedules.update("r1", payload={"a": 3}, expected_revision=5)
    assert schedules.update("r1", payload={"a": 3}, expected_revision=6).revision == 7
    actions = [(c.action, c.revision, c.actor) for c in reversed(schedules.history("r1"))]
    assert actions == [
        ("created", 1, "test"),
        ("updated", 2, "test"),
        ("updated", 3, "test"),
        ("paused", 5, "ops"),
        ("resumed", 6, "ops"),
        ("updated", 7, actions[-1][2]),
    ]
    assert schedules.history("r1")[0].changes == {"payload": [{"a": 2}, {"a": 3}]}
    assert schedules.delete("r1", actor="ops") is True
    assert schedules.delete("r1") is False
    with pytest.raises(schedules.ScheduleNotFound):
        schedules.get("r1")
    assert ScheduleChange.objects.filter(schedule_id="r1", action="deleted").count() == 1


@pytest.mark.django_db(transaction=True)
def test_writes_join_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        schedules.create("r2", activity=ACTIVITY, every=300)
        raise RuntimeError("rolled back")
    assert schedules.list() == []
    assert not ScheduleChange.objects.filter(schedule_id="r2").exists()


@pytest.mark.django_db(transaction=True)
def test_a_row_runs_as_a_job_with_the_declaration_rules_and_its_floor():
    row = schedules.create("r3", activity=ACTIVITY, every=timedelta(minutes=5), anchor="2030-01-01T00:02:00Z")
    job = job_of(row)
    assert isinstance(job, RowJob) and job.validate() == []
    floor = row.timing_changed_at
    first = job.schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC))
    # Nothing before the row existed: the first occurrence is the lattice's first after its floor.
    assert first is not None and first >= floor and first - floor <= timedelta(minutes=5)
    assert (first - datetime(2030, 1, 1, 0, 2, tzinfo=UTC)) % timedelta(minutes=5) == timedelta(0)
    once = job_of(schedules.create("r4", activity=ACTIVITY, at="2099-01-01T00:00:00Z"))
    assert once.schedule.between(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)) == [
        datetime(2099, 1, 1, tzinfo=UTC)
    ]
    assert once.schedule.next_after(datetime(2099, 1, 1, tzinfo=UTC)) is None


def test_preview_is_in_the_schedule_zone_and_refuses_like_create():
    values = {"kind": "cron", "cron": "30 2 * * *", "tz": "Europe/Paris"}
    after = datetime(2030, 3, 29, 12, tzinfo=UTC)  # spring forward on the 31st
    found = preview(values, count=3, after=after)
    assert [x.isoformat() for x in found] == [
        "2030-03-30T01:30:00+00:00",
        "2030-03-31T01:30:00+00:00",  # 02:30 CET does not exist: shifted by the gap (03:30 CEST)
        "2030-04-01T00:30:00+00:00",
    ]
    with pytest.raises(schedules.ScheduleInvalid) as caught:
        preview({"kind": "cron", "cron": "nope"})
    assert list(caught.value.errors) == ["cron"]


@pytest.mark.django_db
def test_checks_report_a_row_clashing_with_a_declaration_and_a_row_that_no_longer_validates(settings):
    from runnerq_django import conf
    from runnerq_django.scheduler.checks import check_orphaned_progress
    from runnerq_django.scheduler.row_checks import check_runtime_schedules

    schedules.create("later.declared", activity=ACTIVITY, every=60)
    schedules.create("by.hand", activity=ACTIVITY, cron="* * * * *")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runnerq_schedules SET cron = 'not cron' WHERE id = 'by.hand'")
    assert check_runtime_schedules(None, databases=["default"]) == [
        m for m in check_runtime_schedules(None, databases=["default"]) if m.id == "runnerq.E107"
    ]
    settings.RUNNERQ = {
        **settings.RUNNERQ,
        "SCHEDULER": {
            **settings.RUNNERQ.get("SCHEDULER", {}),
            "JOBS": {"later.declared": {"activity": ACTIVITY, "every": 60}},
        },
    }
    found = {(m.id, m.msg.split("'")[1]) for m in check_runtime_schedules(None, databases=["default"])}
    assert found == {("runnerq.E106", "later.declared"), ("runnerq.E107", "by.hand")}
    assert check_runtime_schedules(None, databases=None) == []  # a database check only
    # A schedule's progress is no orphan (W104 is for ids no longer declared).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runnerq_periodic_occurrences (idempotency_key, namespace, job_id, occurrence, node)"
            " VALUES ('k1', %s, 'by.hand', now(), 'n')",
            [conf.scheduler_settings().namespace],
        )
        cursor.execute(
            "INSERT INTO runnerq_periodic_occurrences (idempotency_key, namespace, job_id, occurrence, node)"
            " VALUES ('k2', %s, 'was.deleted', now(), 'n')",
            [conf.scheduler_settings().namespace],
        )
    orphans = [m.msg for m in check_orphaned_progress(None, databases=["default"])]
    assert any("was.deleted" in m for m in orphans) and not any("by.hand" in m for m in orphans)
