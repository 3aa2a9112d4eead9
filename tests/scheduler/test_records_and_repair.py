"""Failure cases 1, 1b, 2, 3, 8, 11 and 13 of the scheduler brief (real Postgres and Redis; the cases
with several schedulers run each in a process of its own)."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db import connection
from django.test import override_settings

from runnerq_django.scheduler.status import job_states
from tests.scheduler import remote
from tests.scheduler.conftest import T0, UTC, events, iso, job, raw_redis, redis_cache
from tests.scheduler.remote import job_config

MIN = timedelta(minutes=1)
S = timedelta(seconds=1)


def test_case_1_eviction_of_one_record_is_repaired_from_postgres_evidence(env, remote_schedulers):
    jobs = [job_config("a"), job_config("b")]
    # Two scheduler processes: the owner, and another one (fencing off, so it writes too).
    owner, other = remote_schedulers(env.config(jobs), env.config(jobs, fencing=False))
    owner.tick(T0 + S)
    owner.tick(T0 + MIN + S)
    env.cache.delete(env.key("a"))

    # The other process has no memory of "a": its progress must come from Postgres.
    reply = other.tick(T0 + 2 * MIN + S)

    assert reply["report"]["repairs"] == [["a", "missing", "db_evidence"]]
    assert [(s["job_id"], s["reason"], s["source"]) for s in reply["signals"]] == [
        ("a", "missing", "db_evidence")
    ]
    assert [m for m in reply["metrics"] if m[0] == "periodic_repairs"] == [
        ["periodic_repairs", 1, {"namespace": env.namespace, "reason": "missing"}]
    ]  # counter +1
    (line,) = remote.events(reply, "periodic.record_repaired")
    assert line["level"] == "WARNING"
    assert (line["job_id"], line["reason"], line["source"], line["key"]) == (
        "a",
        "missing",
        "db_evidence",
        env.key("a"),
    )
    expected = ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z", "2030-01-07T12:02:00Z"]
    assert iso(env.occurrences("a")) == expected  # nothing skipped, nothing twice
    assert iso(env.occurrences("b")) == expected
    assert env.record("a")["last"] == "2030-01-07T12:02:00Z"
    (state_a, state_b) = job_states([job("a"), job("b")], namespace=env.namespace, cache=env.cache)
    assert state_a.repairs == {"missing": 1}  # this eviction; a first record is no repair
    assert state_b.repairs == {}  # b was never repaired


def test_case_1b_flush_of_every_record_repairs_each_job_once_and_the_lease_stays_in_postgres(
    private_env, scheduler_logs
):
    env = private_env
    jobs = [job("a", coalesce=False), job("b"), job("c", cron="*/2 * * * *")]
    core = env.core(jobs)
    core.tick(T0 + S)
    token = core.lease.token
    env.cache.clear()  # FLUSHDB: every record gone (a cache lease key would be gone too)

    report = core.tick(T0 + 2 * MIN + S)

    assert sorted(report.repairs) == [
        ("a", "missing", "db_evidence"),
        ("b", "missing", "db_evidence"),
        ("c", "missing", "db_evidence"),
    ]
    assert report.owner and core.lease.token == token  # ownership never depended on the cache
    # Exactly one row per due occurrence: a catches up every missed one, b coalesces to the latest.
    assert iso(env.occurrences("a")) == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:01:00Z",
        "2030-01-07T12:02:00Z",
    ]
    assert iso(env.occurrences("b")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:02:00Z"]
    assert iso(env.occurrences("c")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:02:00Z"]
    assert {j: env.record(j)["next"] for j in "abc"} == {
        "a": "2030-01-07T12:03:00Z",
        "b": "2030-01-07T12:03:00Z",
        "c": "2030-01-07T12:04:00Z",
    }
    assert core.tick(T0 + 2 * MIN + 2 * S).repairs == []


def test_case_2_corrupted_records_are_classified_per_key_and_rebuilt_by_the_owner_only(
    private_env, remote_schedulers
):
    env = private_env
    names = ["ok", "not_a_dict", "bad_iso", "wrong_v", "alien_bytes"]
    jobs = [job_config(name) for name in names]
    owner, bystander = remote_schedulers(env.config(jobs), env.config(jobs))  # two processes
    owner.tick(T0 + S)
    good = env.record("bad_iso")
    env.cache.set(env.key("not_a_dict"), ["not", "a", "dict"])
    env.cache.set(env.key("bad_iso"), {**good, "job": "bad_iso", "next": "tomorrow-ish"})
    env.cache.set(env.key("wrong_v"), {**good, "job": "wrong_v", "v": 99})
    raw = raw_redis(env.cache)
    raw.set(env.cache.make_key(env.key("alien_bytes")), b"\x80\x05not-a-pickle-nor-json")

    # A non-owner sees the same problems, serves a rebuilt view, and writes nothing.
    view = bystander.tick(T0 + MIN + S)
    assert (
        not view["report"]["writer"] and view["report"]["repairs"] == [] and view["report"]["written"] == []
    )
    assert view["signals"] == [] and not remote.events(view, "periodic.record_repaired")
    assert raw.get(env.cache.make_key(env.key("alien_bytes"))) == b"\x80\x05not-a-pickle-nor-json"
    assert env.cache.get(env.key("wrong_v"))["v"] == 99
    assert view["report"]["views"]["bad_iso"][1] == "2030-01-07T12:01:00Z"  # the rebuilt view, in memory only

    reply = owner.tick(T0 + MIN + S)
    assert sorted(map(tuple, reply["report"]["repairs"])) == [
        ("alien_bytes", "unreadable", "db_evidence"),
        ("bad_iso", "unreadable", "db_evidence"),
        ("not_a_dict", "unreadable", "db_evidence"),
        ("wrong_v", "schema", "db_evidence"),
    ]
    for name in names:
        assert env.record(name)["next"] == "2030-01-07T12:02:00Z", name
        assert iso(env.occurrences(name)) == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"], name
    reasons = {
        (r["job_id"], r["reason"]) for r in remote.events(reply, "periodic.record_repaired", "WARNING")
    }
    assert reasons == {
        ("alien_bytes", "unreadable"),
        ("bad_iso", "unreadable"),
        ("not_a_dict", "unreadable"),
        ("wrong_v", "schema"),
    }


def test_case_3_schedule_change_restarts_from_the_new_schedule_and_a_definition_change_keeps_progress(
    env, remote_schedulers
):
    from runnerq_django.models import Input

    # Three releases of the code, each a process of its own, alive at the same time.
    v1, v2, v3 = remote_schedulers(
        env.config([job_config("c", cron="*/5 * * * *")], release=1),
        env.config([job_config("c", cron="*/7 * * * *")], release=2),
        env.config([job_config("c", cron="*/7 * * * *", payload={"report": "v3"})], release=3),
    )
    v1.tick(T0 + S)  # enqueues 12:00
    v1.tick(T0 + 4 * MIN)

    deployed = v2.tick(T0 + 5 * MIN + 30 * S)  # the deploy: same id, new cron, a higher release
    assert deployed["report"]["repairs"] == [["c", "schedule_changed", "declaration"]]
    (line,) = remote.events(deployed, "periodic.record_repaired")
    assert line["level"] == "INFO"  # expected after a deploy (the record came from release 1)
    assert deployed["report"]["enqueued"] == {}  # 12:05 belonged to the old schedule: never enqueued
    assert env.record("c")["next"] == "2030-01-07T12:07:00Z"
    old = v1.tick(T0 + 5 * MIN + 31 * S)["report"]  # the old release, still alive, is not the owner any more
    assert not old["writer"] and old["enqueued"] == {} and old["written"] == []
    v2.tick(T0 + 7 * MIN + S)
    assert iso(env.occurrences("c")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:07:00Z"]

    # A definition-only change (the payload) is not a repair: progress is kept, new args are used.
    changed = v3.tick(T0 + 14 * MIN + S)["report"]
    assert changed["repairs"] == [] and changed["stale_definitions"] == ["c"]
    assert changed["enqueued"] == {"c": ["2030-01-07T12:14:00Z"]}
    assert iso(env.occurrences("c")) == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:07:00Z",
        "2030-01-07T12:14:00Z",
    ]
    newest = Input.objects.filter(
        activity_id__in=_activity_ids(env.namespace, "c", "2030-01-07T12:14:00Z")
    ).get()
    assert newest.payload == {"report": "v3"}
    assert (
        env.record("c")["dfp"]
        == env.core([job("c", cron="*/7 * * * *", payload={"report": "v3"})]).specs[0].dfp
    )
    assert env.record("c")["by"]["release"] == 3


def _activity_ids(namespace, job_id, occurrence):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM runnerq_activities WHERE metadata->>'periodic_namespace' = %s AND "
            "metadata->>'periodic_job' = %s AND metadata->>'periodic_occurrence' = %s",
            [namespace, job_id, occurrence],
        )
        return [row[0] for row in cursor.fetchall()]


def test_case_8_a_sparse_job_is_kept_alive_by_touches_and_repaired_exactly_after_expiry(env):
    yearly = job("yearly", cron="0 0 1 1 *")
    monthly_interval = job("every30d", every=timedelta(days=30), anchor="2030-01-01T00:00:00Z")
    core = env.core([yearly, monthly_interval])
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    core.tick(start)
    raw = raw_redis(env.cache)
    key = env.cache.make_key(env.key("yearly"))
    assert raw.ttl(key) > 3 * 365 * 86400  # TTL = max(35 days, 3 x the longest period)

    raw.expire(key, 100)  # the TTL has nearly run out
    report = core.tick(start + timedelta(hours=2))
    assert "yearly" in report.touched and raw.ttl(key) > 3 * 365 * 86400
    raw.expire(key, 100)
    assert "yearly" not in core.tick(start + timedelta(hours=2, minutes=10)).touched  # about once an hour

    # Let both records expire for real, then tick months later from a fresh process.
    for name in ("yearly", "every30d"):
        raw.pexpire(env.cache.make_key(env.key(name)), 1)
    time.sleep(0.05)
    core.close()  # the scheduler restarts: the new process has no memory of its own
    later = env.core([yearly, monthly_interval]).tick(datetime(2030, 6, 1, tzinfo=UTC))
    assert ("yearly", "missing", "db_evidence") in later.repairs
    assert env.record("yearly")["last"] == "2030-01-01T00:00:00Z"
    assert env.record("yearly")["next"] == "2031-01-01T00:00:00Z"
    assert iso(env.occurrences("yearly")) == ["2030-01-01T00:00:00Z"]
    # The interval stays on its lattice (2030-01-01 + k * 30 days): no re-anchoring at "now".
    assert env.record("every30d")["next"] == "2030-06-30T00:00:00Z"


def test_case_11_a_removed_job_is_never_enqueued_again_and_a_rename_is_a_new_job(env, scheduler_logs):
    from runnerq_django.scheduler.checks import check_orphaned_progress

    before = env.core([job("keep"), job("gone")])
    before.tick(T0 + S)
    raw = raw_redis(env.cache)
    gone_key = env.cache.make_key(env.key("gone"))
    raw.expire(gone_key, 50)
    before.close()  # the deploy: the new code's process takes over

    after = env.core([job("keep")])
    for minutes in (1, 2, 125):  # including a tick that would touch a record older than an hour
        assert after.tick(T0 + minutes * MIN + S).owner
    assert iso(env.occurrences("gone")) == ["2030-01-07T12:00:00Z"]
    assert 0 < raw.ttl(gone_key) <= 50  # never read nor touched: it expires on its own

    after.close()
    renamed = env.core([job("keep"), job("gone_v2")])
    report = renamed.tick(T0 + 126 * MIN + S)
    assert "gone_v2" in report.created  # a new job, not the old progress
    assert [r for r in report.repairs if r[0] == "gone_v2"] == []
    jobs = {
        "keep": {"activity": "tests.scheduler.Tick", "every": 60},
        "gone_v2": {"activity": "tests.scheduler.Tick", "every": 60},
    }
    with override_settings(RUNNERQ={"SCHEDULER": {"NAMESPACE": env.namespace, "JOBS": jobs}}):
        warnings = check_orphaned_progress(None, databases=["default"])
    assert [w.id for w in warnings] == ["runnerq.W104"]
    assert "'gone'" in warnings[0].msg


def test_case_13_a_failed_repair_write_is_logged_the_view_is_used_and_the_write_is_retried(
    private_env, private_redis, scheduler_logs
):
    import redis

    admin = redis.Redis.from_url(private_redis["url"])
    admin.execute_command(
        "ACL", "SETUSER", "scheduler", "on", ">secret", "~*", "&*", "+@read", "+@connection", "+@transaction"
    )
    read_only = redis_cache(private_redis["url"].replace("redis://", "redis://scheduler:secret@"))
    env = private_env
    env.cache = read_only
    core = env.core([job("a")])

    first = core.tick(T0 + S)
    assert first.created == ["a"] and first.repairs == []
    assert first.write_error and "NOPERM" in first.write_error.upper()
    (error,) = events(scheduler_logs, "periodic.record_write_failed", logging.ERROR)
    assert error.jobs == "a"
    assert first.enqueued == {"a": [T0]}  # the in-memory view served this tick
    assert read_only.get(env.key("a")) is None

    second = core.tick(T0 + MIN + S)  # still failing: the memory carries progress, nothing is lost
    assert second.enqueued == {"a": [T0 + MIN]} and second.write_error

    admin.execute_command("ACL", "SETUSER", "scheduler", "+@write")
    third = core.tick(T0 + MIN + 2 * S)
    assert third.repairs == [("a", "missing", "db_evidence")] and third.write_error is None
    assert read_only.get(env.key("a"))["next"] == "2030-01-07T12:02:00Z"
    assert iso(env.occurrences("a")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]
