"""Hostile cache values: a pickle gadget in a record's key never runs -- not in the tick,
not in ``runnerq_schedule``, not in the admin's scheduler page -- and a well-formed record with
forged progress is repaired, not trusted. Real Redis, real Postgres, django-redis's default
pickle serializer on the alias (the configuration that was exploitable)."""

from __future__ import annotations

import io
import json
import logging
import pickle
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings

from runnerq_django.scheduler import declarations, records
from runnerq_django.scheduler.status import job_states
from tests.scheduler.conftest import PICKLE_SERIALIZER, T0, events, iso, job, raw_redis, redis_cache

S = timedelta(seconds=1)
MIN = timedelta(minutes=1)


class Gadget:
    """Unpickling it creates ``path``: the marker of code run by ``pickle.loads``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "unpickled"


def plant(cache, key: str, marker) -> None:
    """The gadget at the backend's own key, as anyone with write access to Redis could put it."""
    raw_redis(cache).set(cache.make_key(key), pickle.dumps(Gadget(marker)))


def prove_the_gadget_runs(cache, key: str, tmp_path) -> None:
    """Control: django-redis's own ``get`` on this alias runs it (so the tests above mean something)."""
    control = tmp_path / "control"
    plant(cache, key, control)
    cache.get(key)
    assert control.exists()


def test_a_pickle_gadget_in_a_record_is_unreadable_in_the_tick_and_never_runs(
    env, redis_url, marker, tmp_path, scheduler_logs
):
    env.cache = redis_cache(redis_url, SERIALIZER=PICKLE_SERIALIZER)  # django-redis's default
    core = env.core([job("a")])
    plant(env.cache, env.key("a"), marker)
    report = core.tick(T0 + S)
    assert not marker.exists()
    assert report.repairs == [("a", "unreadable", "declaration")] and report.enqueued == {"a": [T0]}
    (line,) = events(scheduler_logs, "periodic.record_repaired")
    assert line.reason == "unreadable"
    stored = json.loads(raw_redis(env.cache).get(env.cache.make_key(env.key("a"))))  # rewritten as JSON text
    assert (stored["last"], stored["next"]) == ("2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z")
    assert core.tick(T0 + MIN + S).repairs == []  # and read back as a record under the pickle serializer
    prove_the_gadget_runs(env.cache, env.key("a"), tmp_path)


def test_runnerq_schedule_and_the_admin_page_show_a_gadget_as_unreadable_and_never_run_it(
    env, redis_url, marker, tmp_path, client, django_user_model
):
    from django.contrib.auth.models import Permission

    declared = [j.id for j in declarations.jobs()]
    assert declared, "the test project declares periodic jobs (testproject/examples/periodic.py)"
    pickled = redis_cache(redis_url, SERIALIZER=PICKLE_SERIALIZER)
    for job_id in declared:
        plant(pickled, env.key(job_id), marker)
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "runnerq_scheduler": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url},
    }
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_activity"))
    client.force_login(viewer)
    with override_settings(CACHES=caches, RUNNERQ={"SCHEDULER": {"NAMESPACE": env.namespace}}):
        out = io.StringIO()
        call_command("runnerq_schedule", "--json", stdout=out)
        response = client.get("/admin/runnerq_django/activity/scheduler/")
    assert not marker.exists()
    shown = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {s["id"]: s["state"] for s in shown} == {job_id: "unreadable" for job_id in declared}
    assert all(s["next"] != "-" and s["source"] == "declaration" for s in shown)  # the rebuilt view
    assert response.status_code == 200 and response.context["unavailable"] is None
    assert {j["id"]: (j["state"], j["ok"]) for j in response.context["jobs"]} == {
        job_id: ("unreadable", False) for job_id in declared
    }
    prove_the_gadget_runs(pickled, env.key(declared[0]), tmp_path)


def test_the_database_cache_stores_json_text_and_never_unpickles_its_rows(env, marker, tmp_path):
    from django.core.cache import caches

    from runnerq_django.scheduler.cachetable import ensure_cache_table

    alias = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "runnerq_scheduler": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "rq_test_hostile_cache",
        },
    }
    with override_settings(CACHES=alias):
        assert ensure_cache_table()
        cache = env.cache = caches["runnerq_scheduler"]
        cache.set(env.key("a"), Gadget(marker))  # Django's own set: a base64 pickle in the row
        core = env.core([job("a")])
        first = core.tick(T0 + S)
        assert not marker.exists() and first.repairs == [("a", "unreadable", "declaration")]
        assert core.tick(T0 + MIN + S).repairs == []  # the JSON text it wrote reads back as a record
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT value FROM rq_test_hostile_cache WHERE cache_key LIKE %s", [f"%{env.key('a')}"]
            )
            (text,) = cursor.fetchone()
        assert json.loads(text)["next"] == "2030-01-07T12:02:00Z"
        control = tmp_path / "control"
        cache.set(env.key("a"), Gadget(control))
        cache.get(env.key("a"))  # Django's own get runs it: the reason for the raw read
        assert control.exists()


FORGED = {
    "far": {"next": "2031-01-01T00:00:00Z"},  # an occurrence, a year ahead: would skip them all
    "null": {"next": None},  # an endless schedule "finished": would stop the job
    "off": {"next": "2030-01-07T12:01:30Z"},  # not an occurrence of an every-minute schedule
    "ahead": {"last": "2030-01-07T13:00:00Z", "next": "2030-01-07T13:01:00Z"},  # enqueued in the future
}


def test_a_record_with_forged_progress_is_shown_and_repaired_as_implausible(env, scheduler_logs):
    jobs = [job(name) for name in FORGED]
    core = env.core(jobs)
    core.tick(T0 + S)
    for name, fields in FORGED.items():
        env.cache.set(env.key(name), {**env.record(name), **fields})  # well-formed JSON objects

    states = {s.id: s for s in job_states(jobs, namespace=env.namespace, cache=env.cache, now=T0 + MIN + S)}
    assert {name: s.state for name, s in states.items()} == {name: "implausible" for name in FORGED}
    assert {name: (iso([s.next]), s.source) for name, s in states.items()} == {
        name: (["2030-01-07T12:01:00Z"], "db_evidence") for name in FORGED
    }
    assert "after the schedule's next occurrence" in states["far"].detail
    assert "not an occurrence" in states["off"].detail and "is after now" in states["ahead"].detail

    scheduler_logs.clear()
    report = core.tick(T0 + MIN + S)
    assert sorted(report.repairs) == sorted((name, "implausible", "db_evidence") for name in FORGED)
    assert report.enqueued == {name: [T0 + MIN] for name in FORGED}  # nothing skipped, nothing stopped
    lines = events(scheduler_logs, "periodic.record_repaired", logging.WARNING)
    assert sorted(line.job_id for line in lines) == sorted(FORGED) and {line.reason for line in lines} == {
        "implausible"
    }
    assert {name: env.record(name)["next"] for name in FORGED} == {
        name: "2030-01-07T12:02:00Z" for name in FORGED
    }
    assert core.tick(T0 + 2 * MIN + S).repairs == []
    assert records.IMPLAUSIBLE in records.REASONS
