"""A real ``runworker`` process serving queues on two databases (the configured PostgreSQL and the
embedded 18): work on both, a ``kill -9`` reaped on the second database by the next worker's
reaper there, and a SIGTERM drain that releases what is left on it."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from runnerq_django import client
from tests.helpers import url_for, wait_until
from tests.multidb import handlers
from tests.multidb.conftest import SECOND, fetch, multidb, statuses
from tests.worker.support import worker_processes

pytestmark = [pytest.mark.slow, multidb]


def _row(alias: str, activity_id) -> dict:
    rows = fetch(
        alias,
        "SELECT status, current_worker_id, retry_count FROM runnerq_activities WHERE id = %s",
        [activity_id],
    )
    return dict(zip(("status", "worker", "retry_count"), rows[0])) if rows else {}


def test_one_runworker_serves_two_databases_and_reaps_and_drains_each(routed, live_db_url, tmp_path):
    from django.db import connections

    env = {
        "DJANGO_SETTINGS_MODULE": "tests.multidb.settings",
        "RUNNERQ_SECOND_DATABASE_URL": url_for(connections[SECOND].settings_dict),
        "RUNNERQ_TEST_SETTINGS": json.dumps(
            {
                "QUEUES": [routed["near"], routed["far"]],
                "QUEUE_DATABASES": {routed["far"]: SECOND},
                "HEARTBEAT_SECONDS": 0.5,
                "REAPER_INTERVAL_SECONDS": 0.5,
            }
        ),
    }
    args = ("--lease", "2", "--poll-interval", "0.2", "--concurrency", "2", "--shutdown-grace", "1")
    with worker_processes(live_db_url, tmp_path, "tests.multidb.handlers") as start:
        first = start(*args, env=env)
        near = [client.enqueue(handlers.where, {"n": i}, queue=routed["near"]) for i in range(5)]
        far = [client.enqueue(handlers.where, {"n": i}, queue=routed["far"]) for i in range(5)]
        results = [handle.result(timeout=60) for handle in near + far]
        assert [r["database"] for r in results] == ["default"] * 5 + [SECOND] * 5
        assert {r["pid"] for r in results} == {first.pid}  # one process served both
        assert "database 'default': queue(s)" in first.log() and "database 'second': queue(s)" in first.log()

        # kill -9 mid-handler on the second database: no drain, the lease must run out there.
        stuck = client.enqueue(handlers.sleep, {"seconds": 30}, queue=routed["far"], max_attempts=3)
        wait_until(
            lambda: _row(SECOND, stuck.id).get("status") == "processing", timeout=30, message="claimed"
        )
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        second = start(*args, env=env)
        wait_until(
            lambda: (
                fetch(SECOND, "SELECT event_type FROM runnerq_events WHERE activity_id = %s", [stuck.id])
                == [("Requeued",)]
            ),
            timeout=30,
            message="the second database's reaper to requeue the expired lease",
        )
        wait_until(
            lambda: (row := _row(SECOND, stuck.id))["status"] == "processing" and row["retry_count"] == 1,
            timeout=30,
            message="the next worker to claim it again",
        )
        # SIGTERM: the grace (1 s) is shorter than the handler, so it is released on its database.
        began = time.monotonic()
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
        assert time.monotonic() - began < 10
        row = _row(SECOND, stuck.id)
        assert row["status"] == "pending" and row["worker"] is None
        assert "worker.released" in second.log()
        # The first database's work was untouched by the second's crash and drain.
        assert statuses("default", routed["near"]) == ["completed"] * 5


def test_the_router_and_runworker_migrate_put_the_schema_where_a_queue_lives(live_db_url, tmp_path):
    """``runworker --migrate`` migrates every alias that hosts a queue; ``migrate --database`` of
    an alias that hosts none creates no RunnerQ table there (and records the migrations: once a
    queue is routed there, ``migrate runnerq_django zero --fake`` then ``migrate`` create them)."""
    from testproject.database import embedded_url
    from tests.helpers import manage, manage_env, scratch_database

    def tables(url: str) -> set[str]:
        import psycopg

        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
        return {row[0] for row in rows if row[0].startswith(("runnerq_", "auth_"))}

    def env(url: str, routed: dict) -> dict:
        return manage_env(
            live_db_url,
            DJANGO_SETTINGS_MODULE="tests.multidb.settings",
            RUNNERQ_SECOND_DATABASE_URL=url,
            RUNNERQ_TEST_ROUTER="1",
            RUNNERQ_EXAMPLES="0",
            RUNNERQ_TEST_SETTINGS=json.dumps({"QUEUE_DATABASES": routed}),
        )

    server = embedded_url("postgres")
    with (
        scratch_database(server, prefix="rq_multidb") as hosting,
        scratch_database(server, prefix="rq_multidb") as other,
    ):
        routed = {"far_q": SECOND}
        manage(
            "runworker",
            "--migrate",
            "--until-idle",
            "--queue",
            "far_q",
            "--import",
            "tests.multidb.handlers",
            "-v",
            "0",
            env=env(hosting, routed),
            timeout=180,
        )
        assert {"runnerq_activities", "runnerq_periodic_lease", "auth_user"} <= tables(hosting)

        manage("migrate", "--database", SECOND, "-v", "0", env=env(other, {}), timeout=180)
        assert tables(other) == {t for t in tables(other) if t.startswith("auth_")} and "auth_user" in tables(
            other
        )
        # Routed there later: the recorded migrations are taken back (--fake), then applied.
        manage(
            "migrate",
            "runnerq_django",
            "zero",
            "--fake",
            "--skip-checks",
            "--database",
            SECOND,
            "-v",
            "0",
            env=env(other, routed),
        )
        manage("migrate", "--database", SECOND, "-v", "0", env=env(other, routed), timeout=180)
        assert {"runnerq_activities", "runnerq_periodic_lease"} <= tables(other)
