"""System checks of the scheduler's declarations and cache configuration."""

from __future__ import annotations

from datetime import timedelta

from django.core.management import call_command
from django.test import override_settings

from runnerq_django import conf
from runnerq_django.activities.registry import activity
from runnerq_django.scheduler.checks import cache_problems, declaration_errors
from runnerq_django.scheduler.declarations import JobRegistry, make_job


def _ids(messages):
    return sorted(m.id for m in messages)


def test_valid_declarations_pass_and_each_kind_of_mistake_is_reported():
    assert (
        declaration_errors([make_job("ok", cron="0 4 * * *", tz="Europe/Paris", activity="x.Y")], "default")
        == []
    )
    bad = [
        make_job("dup", every=60, activity="x.Y"),
        make_job("dup", every=120, activity="x.Y"),
        make_job("bad cron", cron="61 * * * *", activity="x.Y"),
        make_job("badtz", cron="0 4 * * *", tz="Mars/Olympus", activity="x.Y"),
        make_job("unanchored", every=timedelta(milliseconds=1500), activity="x.Y"),
        make_job("naive_anchor", every=60, anchor="2030-01-01T00:00:00", activity="x.Y"),
        make_job("no_target", every=60),
        make_job("missing_module", every=60, task="no.such.module.fn"),
        make_job("tiny_grace", every=60, misfire_grace=2, activity="x.Y"),
        make_job("both", every=60, cron="* * * * *", activity="x.Y"),
    ]
    messages = declaration_errors(bad, "default")
    text = "\n".join(m.msg for m in messages)
    assert _ids(messages) == sorted(["runnerq.E101"] + ["runnerq.E102"] * 8 + ["runnerq.W101"])
    for fragment in (
        "'dup' is declared 2 times",
        "'bad cron' must be made of",
        "not a valid cron expression",
        "unknown time zone 'Mars/Olympus'",
        "whole number of seconds",
        "must carry a UTC offset",
        "declare activity=",
        "cannot import 'no.such.module.fn'",
        "under 5 s",
        "exactly one of cron=... or every=...",
    ):
        assert fragment in text, fragment


def test_a_task_target_must_be_an_activity_handler():
    @activity(name="tests.scheduler.checked_handler")
    def checked_handler(payload):
        return payload

    registry = JobRegistry()

    @registry.periodic(id="decorated", every=timedelta(minutes=5))
    @activity(name="tests.scheduler.decorated_handler")
    def decorated(payload):
        return None

    (job,) = registry.declared()
    assert job.activity_type() == "tests.scheduler.decorated_handler" and job.validate() == []
    ok = make_job("by_path", every=60, task="tests.scheduler.test_checks._ids")
    assert any("is not an @activity handler" in problem for problem in ok.validate())
    registry.freeze()
    try:
        registry.periodic(id="late", every=60)(checked_handler)
    except RuntimeError as exc:
        assert "declared after the scheduler read its declarations" in str(exc)
    else:
        raise AssertionError("a frozen registry accepted a declaration")


def test_cache_alias_problems_are_flagged(tmp_path):
    base = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}
    local = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES={**local, "runnerq_scheduler": local["default"]}):
        assert _ids(cache_problems()) == ["runnerq.W103"]
    with override_settings(CACHES=local):
        assert _ids(cache_problems()) == ["runnerq.E103"]
    # Backends the scheduler could only read by unpickling are refused, naming the alias and the fix.
    file_based = {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(tmp_path)}
    sharded = {**base, "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"}}
    for unsafe, what in (
        (file_based, "FileBasedCache, which unpickles"),
        (sharded, "client class ShardClient"),
    ):
        with override_settings(CACHES={**local, "runnerq_scheduler": unsafe}):
            (error,) = cache_problems()
        assert error.id == "runnerq.E104" and "'runnerq_scheduler'" in error.msg and what in error.msg
        assert "DatabaseCache" in error.hint or "DefaultClient" in error.hint
    with override_settings(CACHES={**local, "runnerq_scheduler": {**base, "BACKEND": "nowhere.RedisCache"}}):
        assert _ids(cache_problems()) == ["runnerq.E105"]
    # The default pickle serializer and IGNORE_EXCEPTIONS are fine: records are read raw, as JSON.
    for options in ({}, {"IGNORE_EXCEPTIONS": True}):
        with override_settings(CACHES={**local, "runnerq_scheduler": {**base, "OPTIONS": options}}):
            assert cache_problems() == []


def test_scheduler_settings_are_validated():
    with override_settings(
        RUNNERQ={
            "SCHEDULER": {
                "NAMESPACE": "has space",
                "RELEASE": -1,
                "LEASE_SECONDS": 6,
                "MAX_INTERVAL_SECONDS": 5,
                "BOGUS": 1,
                "JOBS": [],
            }
        }
    ):
        problems = "\n".join(conf.validate())
    for fragment in (
        "['NAMESPACE'] must be",
        "['RELEASE'] must be",
        "a third of",
        "'BOGUS'] is not a known",
        "['JOBS'] must be a dict",
    ):
        assert fragment in problems, fragment


def test_manage_py_check_runs_the_scheduler_checks_on_the_project(capsys):
    call_command("check")  # the test project's own declarations (testproject/examples/periodic.py) are valid
    jobs = {"x": {"activity": "x.Y", "cron": "not cron"}}
    with override_settings(RUNNERQ={"SCHEDULER": {"JOBS": jobs}}):
        from django.core import checks

        errors = [m for m in checks.run_checks(tags=["runnerq"]) if m.id == "runnerq.E102"]
    assert errors and "not a valid cron expression" in errors[0].msg
