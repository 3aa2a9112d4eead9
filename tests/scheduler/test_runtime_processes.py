"""Runtime schedules under real scheduler processes: two schedulers racing while an operator edits
one schedule's timing, pauses another and deletes a third; the owner killed (SIGKILL, mid-run)
and the cache flushed; a third scheduler joining. Every occurrence exactly once, none outside
either timing, none enqueued while paused or after the delete, none missed. Real Postgres and Redis.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest
from django.db import connection

from runnerq_django.scheduler import runtime_schedules as schedules
from runnerq_django.scheduler.rows import job_of
from runnerq_django.scheduler.tick import db_now
from tests.helpers import REPO, manage_env
from tests.scheduler.conftest import ACTIVITY, raw_redis

pytestmark = pytest.mark.slow

RUN_SECONDS = 16


def spawn(config: dict, db_url: str, out_path) -> subprocess.Popen:
    with open(out_path, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.scheduler.proc", json.dumps(config)],
            cwd=REPO,
            env=manage_env(db_url),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def enqueued(namespace: str, job_id: str) -> list[tuple[datetime, datetime]]:
    """``(nominal occurrence, created_at)`` of each activity of the job."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (metadata->>'periodic_occurrence')::timestamptz, created_at FROM runnerq_activities "
            "WHERE metadata->>'periodic_namespace' = %s AND metadata->>'periodic_job' = %s ORDER BY 1",
            [namespace, job_id],
        )
        return list(cursor.fetchall())


def owner_pid(namespace: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT owner FROM runnerq_periodic_lease WHERE namespace = %s", [namespace])
        row = cursor.fetchone()
    return int(row[0].split(":")[1]) if row else None


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def now() -> datetime:
    return db_now("default")


def test_two_schedulers_racing_with_edits_a_kill_and_a_flush(env, live_db_url, redis_url, tmp_path):
    grace = {"misfire_grace": 120, "coalesce": False, "max_catch_up": 200}
    # croniter's sixth field is the second: every even second, then edited to 1, 4, 7 ... 58.
    a0 = schedules.create("rt.edit", activity=ACTIVITY, cron="* * * * * */2", **grace)
    b0 = schedules.create("rt.pause", activity=ACTIVITY, every=2, **grace)
    schedules.create("rt.delete", activity=ACTIVITY, every=1, **grace)
    config = {
        "namespace": env.namespace,
        "cache_url": redis_url,
        "jobs": [],
        "lease_seconds": 2,
        "max_interval": 0.2,
        "run_seconds": RUN_SECONDS,
    }
    procs = {name: spawn(config, live_db_url, tmp_path / f"{name}.log") for name in ("p1", "p2")}
    try:
        wait_for(lambda: len(enqueued(env.namespace, "rt.edit")) >= 2)
        # The operator edits a's cron: from even seconds to seconds 1, 4, 7 ... 58.
        edit_before = now()
        a1 = schedules.update("rt.edit", cron="* * * * * 1-59/3", actor="ops")
        edit_after = now()
        time.sleep(1)
        paused_after = schedules.pause("rt.pause", actor="ops").updated_at
        time.sleep(1)
        schedules.delete("rt.delete", actor="ops")
        deleted_after = now()
        time.sleep(1)
        # The owner is killed mid-run, and the cache flushed: the other one takes over and
        # repairs every record from Postgres; a third scheduler joins.
        victim = owner_pid(env.namespace)
        by_pid = {proc.pid: name for name, proc in procs.items()}
        assert victim in by_pid
        os.kill(victim, signal.SIGKILL)
        client = raw_redis(env.cache)
        for key in client.scan_iter(match=f"*periodic:v1:{env.namespace}:*"):
            client.delete(key)
        procs["p3"] = spawn(config, live_db_url, tmp_path / "p3.log")
        time.sleep(3)
        resume_before = now()
        schedules.resume("rt.pause", actor="ops")
        time.sleep(4)
        check_until = now() - timedelta(seconds=3)  # every scheduler but the victim still runs
    finally:
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    for name, proc in procs.items():
        if proc.pid != victim:
            assert proc.returncode == 0, logs[name]

    # Exactly once: one activity per (schedule, nominal occurrence).
    for job_id in ("rt.edit", "rt.pause", "rt.delete"):
        nominal = [o for o, _ in enqueued(env.namespace, job_id)]
        assert len(nominal) == len(set(nominal)), job_id

    # The edited schedule: nothing neither timing had; the old timing's own instants only
    # before the edit, the new one's only after; none missed on either side.
    window = (edit_before - timedelta(minutes=5), check_until + timedelta(minutes=5))
    old = set(job_of(a0).schedule.between(*window))
    new = set(job_of(a1).schedule.between(*window))
    got = {o for o, _ in enqueued(env.namespace, "rt.edit")}
    assert got <= old | new
    assert got & (old - new) and got & (new - old)  # both timings ran
    assert all(o <= edit_after for o in got - new)
    assert all(o >= a1.timing_changed_at for o in got - old)
    first = min(got)
    assert {o for o in old if first <= o <= edit_before} <= got
    assert {o for o in new if o <= check_until} <= got

    # The paused schedule: nothing enqueued while paused; resumed, every held occurrence inside
    # the grace (all of them) enqueued: none missed over the whole run.
    rows = enqueued(env.namespace, "rt.pause")
    assert not [o for o, created in rows if paused_after < created < resume_before]
    got = {o for o, _ in rows}
    lattice = set(job_of(b0).schedule.between(min(got) - timedelta(seconds=1), check_until))
    assert lattice <= got and got <= set(job_of(b0).schedule.between(*window))

    # The deleted schedule: nothing after the delete.
    rows = enqueued(env.namespace, "rt.delete")
    assert rows and max(o for o, _ in rows) <= deleted_after
    assert max(created for _, created in rows) <= deleted_after

    # The survivors repaired the flushed records from Postgres, reported by the owner.
    ticks = [
        json.loads(line) for name in procs for line in logs[name].splitlines() if line.startswith('{"node"')
    ]
    repairs = {(r[0], r[1], r[2]) for t in ticks for r in t["repairs"]}
    assert ("rt.pause", "missing", "db_evidence") in repairs or (
        "rt.edit",
        "missing",
        "db_evidence",
    ) in repairs


@pytest.mark.direct_postgres("LISTEN runnerq_schedules on the scheduler's session")
def test_a_change_wakes_an_idle_scheduler_through_listen(env, live_db_url, redis_url, tmp_path):
    """An idle scheduler sleeps MAX_INTERVAL_SECONDS (60 here) between ticks; a schedule created
    meanwhile is announced by the table's trigger, so it is enqueued long before that sleep ends
    (the process runs 20 s in all: without the wake-up it would tick once, before the row existed)."""
    config = {
        "namespace": env.namespace,
        "cache_url": redis_url,
        "jobs": [],
        "lease_seconds": 180,
        "max_interval": 60,
        "run_seconds": 20,
    }
    proc = spawn(config, live_db_url, tmp_path / "idle.log")
    try:
        wait_for(lambda: (tmp_path / "idle.log").read_text().count('{"node"') >= 1)  # ticked, now asleep
        time.sleep(1)
        schedules.create("woken", activity=ACTIVITY, every=1, misfire_grace=60)
        wait_for(lambda: len(enqueued(env.namespace, "woken")) >= 1, timeout=15)
    finally:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp_path / "idle.log").read_text()
    ticks = [
        json.loads(line)
        for line in (tmp_path / "idle.log").read_text().splitlines()
        if line.startswith('{"node"')
    ]
    assert len(ticks) >= 2 and any("woken" in t["enqueued"] for t in ticks)


def test_killed_between_enqueue_and_record_write_while_the_timing_changes(
    env, live_db_url, redis_url, tmp_path
):
    """SIGKILL after the enqueue committed and before the record write (mid-tick), the timing
    edited before the next scheduler's tick: the committed occurrence is not enqueued again, the
    new timing starts at the edit, nothing outside either timing."""
    row = schedules.create("crashy", activity=ACTIVITY, every=60, coalesce=False, misfire_grace=3600)
    base = now().replace(second=0, microsecond=0) + timedelta(minutes=2)
    # Fencing off: the killed process's lease would otherwise hold the namespace for its 30 s.
    config = {
        "namespace": env.namespace,
        "cache_url": redis_url,
        "jobs": [],
        "max_interval": 1,
        "fencing": False,
    }
    crashed = spawn(
        {**config, "ticks": [(base + timedelta(seconds=1)).isoformat()], "crash_after_enqueue": True},
        live_db_url,
        tmp_path / "crash.log",
    )
    crashed.wait(timeout=60)
    assert crashed.returncode == -signal.SIGKILL, (tmp_path / "crash.log").read_text()
    assert [o for o, _ in enqueued(env.namespace, "crashy")] == [base]
    assert env.record("crashy") is None  # killed before the record write
    edited = schedules.update("crashy", every=90, anchor="1970-01-01T00:00:30Z")
    ticks = [(base + timedelta(seconds=s)).isoformat() for s in (2, 61, 121, 181, 241, 301)]
    after = spawn({**config, "ticks": ticks}, live_db_url, tmp_path / "after.log")
    after.wait(timeout=120)
    assert after.returncode == 0, (tmp_path / "after.log").read_text()
    got = [o for o, _ in enqueued(env.namespace, "crashy")]
    window = (base - timedelta(hours=1), base + timedelta(hours=1))
    old = set(job_of(row).schedule.between(*window))
    new = set(job_of(edited).schedule.between(*window))
    assert len(got) == len(set(got)) and set(got) <= old | new
    assert base in got and set(got) - new <= {base}  # the old timing's only one: before the edit
    # None missed: every new instant after the last enqueued one (the ticks run ahead of the
    # clock the edit was made by; nothing at or before an enqueued instant is enqueued again).
    assert {o for o in new if base < o <= base + timedelta(seconds=301)} <= set(got)
