"""The read-only view (``status.job_states``, ``manage.py runnerq_schedule``) and the commands."""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.management import call_command
from django.db import connection

from runnerq_django.scheduler.status import job_states
from tests.helpers import manage
from tests.scheduler.conftest import T0, job, process_env, raw_redis

MIN = timedelta(minutes=1)
S = timedelta(seconds=1)


def _snapshot(env):
    client = raw_redis(env.cache)
    keys = sorted(client.scan_iter(match=f"*periodic:v1:{env.namespace}:*"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM runnerq_periodic_lease WHERE namespace = %s", [env.namespace])
        lease = cursor.fetchall()
        cursor.execute(
            "SELECT namespace, job_id, reason, count FROM runnerq_periodic_repairs ORDER BY 1, 2, 3"
        )
        repairs = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM runnerq_periodic_occurrences")
        guards = cursor.fetchone()[0]
    return {k: client.get(k) for k in keys}, {k: client.pttl(k) for k in keys}, lease, repairs, guards


def test_job_states_reports_each_state_and_writes_nothing(env):
    jobs = [job("ok"), job("gone"), job("broken"), job("moved", cron="*/5 * * * *")]
    core = env.core(jobs)
    core.tick(T0 + S)
    core.tick(T0 + MIN + S)
    env.cache.delete(env.key("gone"))
    env.cache.set(env.key("broken"), "garbage")
    values, ttls, lease, repairs, guards = _snapshot(env)

    changed = [job("ok"), job("gone"), job("broken"), job("moved", cron="*/7 * * * *")]
    states = {
        s.id: s for s in job_states(changed, namespace=env.namespace, cache=env.cache, now=T0 + 2 * MIN)
    }

    after_values, after_ttls, after_lease, after_repairs, after_guards = _snapshot(env)
    assert (
        after_values == values
        and after_lease == lease
        and after_repairs == repairs
        and after_guards == guards
    )
    assert all(after_ttls[k] <= ttls[k] for k in ttls)  # no touch either
    assert env.cache.get(env.key("gone")) is None  # no repair from a status page
    assert {k: s.state for k, s in states.items()} == {
        "ok": "present",
        "gone": "missing",
        "broken": "unreadable",
        "moved": "schedule_changed",
    }
    assert (states["ok"].source, states["gone"].source) == ("record", "db_evidence")
    assert (
        states["gone"].last == T0 + MIN and states["gone"].next == T0 + 2 * MIN
    )  # what the owner will rebuild
    assert states["ok"].owner == core.node and not states["ok"].lease_expired
    assert states["ok"].repairs == {}  # its first record is no repair
    assert states["ok"].written_by == core.node


def test_runnerq_schedule_command_prints_the_view(env, capsys, settings):
    settings.RUNNERQ = {
        "SCHEDULER": {
            "NAMESPACE": env.namespace,
            "JOBS": {"cmd.job": {"activity": "tests.scheduler.Tick", "every": 60}},
        }
    }
    from django.core.cache import caches

    env.cache = caches["runnerq_scheduler"]
    call_command("runnerq_schedule", namespace=env.namespace, json=True)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_id = {row["id"]: row for row in rows}
    assert by_id["cmd.job"]["state"] == "missing" and by_id["cmd.job"]["owner"] is None


def test_runscheduler_once_and_the_database_cache_fallback_work_across_processes(live_db_url, namespace):
    env = process_env(
        live_db_url,
        REDIS_URL="",  # no Redis: the test project's database cache
        scheduler={
            "NAMESPACE": namespace,
            "JOBS": {"db.cached": {"activity": "tests.scheduler.Tick", "every": 3600}},
        },
    )
    first = manage("runscheduler", "--once", env=env)
    assert "owner=True" in first.stdout and "repairs=" in first.stdout
    shown = manage("runnerq_schedule", "--json", env=env)
    rows = {row["id"]: row for row in map(json.loads, shown.stdout.splitlines())}
    assert rows["db.cached"]["state"] == "present"  # written by one process, read by another
    assert rows["db.cached"]["source"] == "record"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM runnerq_scheduler_cache WHERE cache_key LIKE %s",
            [f"%periodic:v1:{namespace}:job:db.cached"],
        )
        assert cursor.fetchone()[0] == 1
