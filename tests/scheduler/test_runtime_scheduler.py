"""One scheduler for declared jobs and runtime schedules, in this process: rows run like
declarations (records, repair, idempotency keys), changes are seen at the next tick, timing edits
enqueue nothing twice and nothing neither timing had, pause holds and resume follows the misfire
policy, the cap and the jitter. Real Postgres, real Redis.

The ticks are given explicit instants after the database's clock (a row's timing starts when it is
written, by that clock)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.db import connection

from runnerq_django.scheduler import records
from runnerq_django.scheduler import runtime_schedules as schedules
from runnerq_django.scheduler.rows import job_of
from runnerq_django.scheduler.tick import db_now
from tests.scheduler.conftest import ACTIVITY, events, iso, job

S = timedelta(seconds=1)


def minute_after(moment: datetime, minutes: int = 1) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=minutes)


def activities(namespace: str, job_id: str) -> list[tuple[str, object, datetime | None]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.metadata->>'periodic_occurrence', i.payload, a.scheduled_at FROM runnerq_activities a "
            "JOIN runnerq_inputs i ON i.activity_id = a.id "
            "WHERE a.metadata->>'periodic_namespace' = %s AND a.metadata->>'periodic_job' = %s ORDER BY 1",
            [namespace, job_id],
        )
        return [
            (row[0], json.loads(row[1]) if isinstance(row[1], str) else row[1], row[2])
            for row in cursor.fetchall()
        ]


def occurrences(namespace: str, job_id: str) -> list[str]:
    return [row[0] for row in activities(namespace, job_id)]


@pytest.mark.django_db(transaction=True)
def test_a_row_runs_like_a_declared_job_and_a_new_one_is_seen_at_the_next_tick(env, scheduler_logs):
    core = env.core([job("declared.one", every=timedelta(minutes=1))])
    base = minute_after(db_now("default"), 2)
    first = core.tick(base + S)
    assert set(first.enqueued) == {"declared.one"}
    schedules.create("row.one", activity=ACTIVITY, every=60, payload={"customer": "acme"})
    report = core.tick(base + timedelta(minutes=1) + S)
    assert set(report.enqueued) == {"declared.one", "row.one"}
    assert iso(report.enqueued["row.one"]) == iso([base + timedelta(minutes=1)])
    assert activities(env.namespace, "row.one")[0][1] == {"customer": "acme"}
    # One record per schedule, under the key declared jobs use; its first write is no repair.
    record = env.record("row.one")
    assert record["job"] == "row.one" and record["last"] == iso([base + timedelta(minutes=1)])[0]
    assert [r.job_id for r in events(scheduler_logs, "periodic.record_created")] == [
        "declared.one",
        "row.one",
    ]
    # Nothing changed: one cheap query, no re-read.
    assert core.refresh_rows() is False


@pytest.mark.django_db(transaction=True)
def test_editing_the_timing_enqueues_nothing_twice_and_nothing_neither_timing_had(env, scheduler_logs):
    core = env.core([])
    row = schedules.create("edit.me", activity=ACTIVITY, every=120, coalesce=False)
    base = minute_after(db_now("default"), 4)
    old = set(job_of(row).schedule.between(base - timedelta(hours=1), base + timedelta(hours=1)))
    for second in range(0, 5 * 60, 20):
        core.tick(base + timedelta(seconds=second))
    before = occurrences(env.namespace, "edit.me")
    assert before and set(before) <= set(iso(old))
    row = schedules.update("edit.me", every=180, anchor="1970-01-01T00:01:00Z")
    new = set(job_of(row).schedule.between(base - timedelta(hours=1), base + timedelta(hours=1)))
    for second in range(5 * 60, 20 * 60, 20):
        core.tick(base + timedelta(seconds=second))
    after = occurrences(env.namespace, "edit.me")
    assert len(after) == len(set(after))  # nothing twice
    assert set(after) <= set(iso(old | new))  # nothing neither timing had
    assert set(after) - set(before) <= set(iso(new)) and len(after) > len(before)
    repaired = events(scheduler_logs, "periodic.record_repaired")
    assert [(r.job_id, r.reason) for r in repaired] == [("edit.me", records.SCHEDULE_CHANGED)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("coalesce", [False, True])
def test_pausing_holds_occurrences_and_resuming_follows_the_misfire_policy(env, coalesce):
    core = env.core([])
    schedules.create("pause.me", activity=ACTIVITY, every=60, coalesce=coalesce, misfire_grace=600)
    base = minute_after(db_now("default"), 2)
    core.tick(base + S)
    assert occurrences(env.namespace, "pause.me") == iso([base])
    schedules.pause("pause.me")
    for minute in range(1, 15):
        core.tick(base + timedelta(minutes=minute) + S)
    assert occurrences(env.namespace, "pause.me") == iso([base])  # held
    schedules.resume("pause.me")
    resumed_at = base + timedelta(minutes=15) + S
    core.tick(resumed_at)
    got = occurrences(env.namespace, "pause.me")
    held_in_grace = [base + timedelta(minutes=m) for m in range(6, 16)]  # grace 10 min
    assert got == iso([base, *(held_in_grace[-1:] if coalesce else held_in_grace)])


@pytest.mark.django_db(transaction=True)
def test_a_deleted_schedule_stops_and_its_id_created_again_starts_afresh(env):
    core = env.core([])
    schedules.create("gone", activity=ACTIVITY, every=60)
    base = minute_after(db_now("default"), 2)
    core.tick(base + S)
    schedules.delete("gone")
    core.tick(base + timedelta(minutes=1) + S)
    assert occurrences(env.namespace, "gone") == iso([base])
    assert "gone" not in {spec.job_id for spec in core.specs}
    schedules.create("gone", activity=ACTIVITY, every=60)
    core.tick(base + timedelta(minutes=3) + S)
    assert occurrences(env.namespace, "gone") == iso([base, base + timedelta(minutes=3)])


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_id_is_declared_in_code_does_not_run(env, scheduler_logs):
    schedules.create("clash", activity=ACTIVITY, every=60, payload="row")
    core = env.core([job("clash", every=timedelta(minutes=1), payload="declared")])
    base = minute_after(db_now("default"), 2)
    core.tick(base + S)
    assert [a[1] for a in activities(env.namespace, "clash")] == ["declared"]
    skipped = events(scheduler_logs, "periodic.schedule_skipped")
    assert [r.job_id for r in skipped] == ["clash"]


@pytest.mark.django_db(transaction=True)
def test_the_cap_and_the_jitter(env):
    core = env.core([])
    schedules.create("capped", activity=ACTIVITY, every=60, max_occurrences=3, jitter=30)
    base = minute_after(db_now("default"), 2)
    for minute in range(6):
        core.tick(base + timedelta(minutes=minute) + S)
    got = activities(env.namespace, "capped")
    assert [a[0] for a in got] == iso([base + timedelta(minutes=m) for m in range(3)])
    assert schedules.get("capped").occurrence_count == 3
    spec_job = job_of(schedules.get("capped"))
    for occurrence, _, scheduled_at in got:
        nominal = records.parse_instant(occurrence)
        # The same delay everywhere (enqueue turns the instant into a delay: within a second of it).
        assert abs(scheduled_at - (nominal + spec_job.jitter_for(nominal))) < S
    assert any(spec_job.jitter_for(records.parse_instant(o)) for o, *_ in got)


@pytest.mark.django_db(transaction=True)
def test_a_one_off_fires_once(env):
    core = env.core([])
    base = minute_after(db_now("default"), 2)
    schedules.create("once", activity=ACTIVITY, at=base + timedelta(minutes=1))
    for minute in range(4):
        core.tick(base + timedelta(minutes=minute) + S)
    assert occurrences(env.namespace, "once") == iso([base + timedelta(minutes=1)])


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_planned_before_a_change_holds_for_the_next_tick(env):
    core = env.core([])
    schedules.create("moved", activity=ACTIVITY, every=60, payload="v1")
    base = minute_after(db_now("default"), 2)
    plan = core.plan(base + S)  # planned with payload v1 ...
    schedules.update("moved", payload="v2")  # ... changed before the enqueue
    core.enqueue(plan)
    core.advance(plan)
    assert occurrences(env.namespace, "moved") == []  # held, not lost
    core.tick(base + 2 * S)
    assert [a[1] for a in activities(env.namespace, "moved")] == ["v2"]
    assert [a[0] for a in activities(env.namespace, "moved")] == iso([base])


@pytest.mark.django_db(transaction=True)
def test_the_status_view_shows_rows_beside_declared_jobs(env):
    from runnerq_django.scheduler import status

    core = env.core([job("declared.two", every=timedelta(minutes=1))])
    schedules.create("row.two", activity=ACTIVITY, every=60)
    schedules.create("row.paused", activity=ACTIVITY, every=60, enabled=False)
    base = minute_after(db_now("default"), 2)
    core.tick(base + S)
    states = {
        s.id: s
        for s in status.job_states(
            [*status.declarations.declared_jobs(), job("declared.two", every=timedelta(minutes=1)), *_rows()],
            namespace=env.namespace,
            cache=env.cache,
            now=base + S,
        )
    }
    assert states["row.two"].state == "present" and states["row.two"].last == base
    assert states["declared.two"].state == "present"
    assert "row.paused" not in states  # paused: not scheduled, like enabled=False in code
    by_default = {s.id for s in status.job_states(namespace=env.namespace, cache=env.cache, now=base + S)}
    assert "row.two" in by_default  # runnerq_schedule and the admin's Scheduler page list rows too


def _rows():
    from runnerq_django.scheduler.rows import runtime_jobs

    return runtime_jobs()


@pytest.mark.django_db(transaction=True)
def test_without_the_table_declared_jobs_still_run_and_a_failing_database_fails_the_tick(env, scheduler_logs):
    core = env.core([job("declared.three", every=timedelta(minutes=1))])
    base = minute_after(db_now("default"), 2)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE runnerq_schedules RENAME TO runnerq_schedules_away")
    try:
        report = core.tick(base + S)
        core.tick(base + 2 * S)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE runnerq_schedules_away RENAME TO runnerq_schedules")
    assert report.db_error is None and set(report.enqueued) == {"declared.three"}
    assert len(events(scheduler_logs, "periodic.schedules_unreadable")) == 1  # said once
