"""The demonstration: two ``runscheduler`` processes, a one-second job, 30 seconds, the cache
flushed twice and the record corrupted once. Afterwards: exactly one activity per occurrence, no
occurrence missing, and every repair logged with its reason."""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections import Counter
from datetime import timedelta

import pytest
import redis
from django.db import connection

from tests.helpers import spawn_manage, stop_process, wait_until
from tests.scheduler.conftest import process_env

pytestmark = pytest.mark.slow

RUN_SECONDS = 30
JOB = "demo.tick"


def _half_second():
    """Sleep to the middle of a second: ticks run just after each whole second, so a flush or a
    corruption here always lands between two ticks (never between a tick's read and its write)."""
    time.sleep((1.5 - time.time() % 1.0) % 1.0)


def test_two_schedulers_one_second_job_flushed_twice_and_corrupted_once(live_db_url, private_redis):
    namespace = "demo"
    env = process_env(
        live_db_url,
        scheduler={
            "NAMESPACE": namespace,
            "MAX_INTERVAL_SECONDS": 1,
            "LEASE_SECONDS": 6,
            "JOBS": {
                JOB: {"activity": "tests.scheduler.Tick", "every": 1, "misfire_grace": 10, "coalesce": False}
            },
        },
        REDIS_URL=private_redis["url"],
    )
    client = redis.Redis.from_url(private_redis["url"])
    key = f":1:periodic:v1:{namespace}:job:{JOB}"
    procs = [spawn_manage("runscheduler", "--log-format", "text", env=env) for _ in range(2)]
    started = time.monotonic()
    try:
        wait_until(lambda: client.exists(key), timeout=20, message="the first record")
        actions = []
        for at, action in ((8, "flush"), (15, "corrupt"), (22, "flush")):
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            wait_until(lambda: client.exists(key), timeout=5, message="a record to disturb")
            _half_second()
            if action == "flush":
                client.flushall()
            else:
                client.set(key, b"\x00\x01 not a pickle, not json")
            actions.append(action)
        time.sleep(max(0.0, RUN_SECONDS - (time.monotonic() - started)))
    finally:
        outputs = [stop_process(proc, signal.SIGTERM) for proc in procs]
    assert actions == ["flush", "corrupt", "flush"]
    assert all(proc.returncode == 0 for proc in procs), outputs

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (metadata->>'periodic_occurrence')::timestamptz AS occurrence, count(*) FROM runnerq_activities "
            "WHERE metadata->>'periodic_namespace' = %s AND metadata->>'periodic_job' = %s GROUP BY 1 ORDER BY 1",
            [namespace, JOB],
        )
        rows = cursor.fetchall()
    occurrences = [row[0] for row in rows]
    assert all(count == 1 for _, count in rows), [r for r in rows if r[1] != 1]  # one activity each
    assert len(occurrences) >= RUN_SECONDS - 6
    # No occurrence is missing: every second from the first to the last one is there.
    gaps = [(a, b) for a, b in itertools.pairwise(occurrences) if b - a != timedelta(seconds=1)]
    assert gaps == []

    lines = [
        line
        for output in outputs
        for line in output.splitlines()
        if "periodic.record_repaired" in line and f"job_id={JOB} " in line
    ]
    warnings = [line for line in lines if " WARNING " in line]
    reasons = Counter(re.search(r"reason=(\w+)", line).group(1) for line in warnings)
    assert reasons == Counter({"missing": 2, "unreadable": 1}), lines
    assert all("source=db_evidence" in line for line in warnings)
    # Only the owner repairs (and logs): one node wrote every repair line.
    assert len({re.search(r"node=(\S+)", line).group(1) for line in lines}) == 1
