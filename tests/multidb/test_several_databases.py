"""Queues on several databases (RUNNERQ['QUEUE_DATABASES']), on two real servers: the configured
PostgreSQL (default) and the embedded PostgreSQL 18 (second). In-process: routing, transactions,
children, a worker serving both, the scheduler, the admin and the commands."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import transaction

from runnerq_django import client
from runnerq_django.exceptions import CrossDatabaseError
from tests.helpers import wait_until
from tests.multidb import handlers
from tests.multidb.conftest import SECOND, fetch, multidb, statuses

pytestmark = multidb


def test_enqueue_routes_each_queue_to_its_database_and_handles_follow(routed):
    near = client.enqueue(handlers.where, {"n": 1}, queue=routed["near"])
    far = client.enqueue(handlers.where, {"n": 2}, queue=routed["far"])
    assert (near.using, far.using) == ("default", SECOND)
    assert statuses("default", routed["near"]) == ["pending"] and statuses("default", routed["far"]) == []
    assert statuses(SECOND, routed["far"]) == ["pending"] and statuses(SECOND, routed["near"]) == []
    # A handle rebuilt from the id and queue alone finds the row on its queue's database.
    assert client.get_handle(far.id, routed["far"]).status() == "pending"
    assert client.get_handle(near.id, routed["near"]).status() == "pending"
    # using= still wins over the routing (an explicit alias, as before).
    forced = client.enqueue(handlers.where, {}, queue=routed["far"], using="default")
    assert forced.using == "default" and statuses("default", routed["far"]) == ["pending"]


def test_a_queue_routed_elsewhere_is_seen_by_the_next_planned_enqueue(routed, settings):
    # handler.enqueue(payload, queue=...) is planned once per handler and queue (client._plan),
    # its database alias with it: a change of QUEUE_DATABASES must reach the next one.
    before = handlers.where.enqueue({"n": 1}, queue=routed["near"])
    settings.RUNNERQ = {**settings.RUNNERQ, "QUEUE_DATABASES": {routed["near"]: SECOND}}
    after = handlers.where.enqueue({"n": 2}, queue=routed["near"])
    assert (before.using, after.using) == ("default", SECOND)
    assert statuses("default", routed["near"]) == ["pending"] and statuses(SECOND, routed["near"]) == [
        "pending"
    ]
    # And the guard of the caller's transaction still runs on each planned enqueue.
    with pytest.raises(CrossDatabaseError), transaction.atomic(using="default"):
        handlers.where.enqueue({"n": 3}, queue=routed["near"])
    assert statuses(SECOND, routed["near"]) == ["pending"]


def test_the_guarantee_holds_inside_atomic_of_the_queues_own_database(routed):
    with pytest.raises(RuntimeError), transaction.atomic(using=SECOND):
        client.enqueue(handlers.where, {}, queue=routed["far"])
        assert statuses(SECOND, routed["far"]) == ["pending"]  # visible inside the transaction
        raise RuntimeError("roll back")
    assert statuses(SECOND, routed["far"]) == []  # rolled back with it


def test_an_enqueue_inside_atomic_of_another_database_is_refused_unless_asked_for(routed):
    refused = r"lives on database 'second'.*across_databases=True"
    with pytest.raises(CrossDatabaseError, match=refused), transaction.atomic(using="default"):
        client.enqueue(handlers.where, {}, queue=routed["far"])
    with pytest.raises(CrossDatabaseError), transaction.atomic(using="default"):
        client.enqueue_many(handlers.where, [{}, {}], queue=routed["far"])
    assert statuses(SECOND, routed["far"]) == []  # refused before anything was written
    # Opted in: written on the second database at once, and it stays when default rolls back.
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        client.enqueue(handlers.where, {}, queue=routed["far"], across_databases=True)
        client.enqueue(handlers.where, {}, queue=routed["near"])
        raise RuntimeError("roll back default")
    assert statuses(SECOND, routed["far"]) == ["pending"] and statuses("default", routed["near"]) == []
    # Inside atomic blocks of both databases, the queue's own one is joined: no refusal.
    with transaction.atomic(using="default"), transaction.atomic(using=SECOND):
        client.enqueue(handlers.where, {}, queue=routed["far"])
    assert statuses(SECOND, routed["far"]) == ["pending", "pending"]


def test_one_worker_serves_both_databases_and_children_stay_with_their_parent(routed, monkeypatch):
    from runnerq_django.worker.options import WorkerOptions
    from runnerq_django.worker.runtime import MultiDatabaseWorker, build_worker

    monkeypatch.setenv("RUNNERQ_EXAMPLES", "0")
    options = WorkerOptions(
        queues=[routed["near"], routed["far"]],
        activity_types=["multidb.where", "multidb.spawn_elsewhere", "multidb.spawn_home"],
        concurrency=2,
        lease_seconds=10,
        heartbeat_seconds=1,
        shutdown_grace_seconds=5,
        poll_interval_seconds=0.2,
    )
    worker = build_worker(options)
    assert isinstance(worker, MultiDatabaseWorker) and worker.aliases == ["default", SECOND]
    worker.start()
    try:
        near = client.enqueue(handlers.where, {"n": 1}, queue=routed["near"])
        far = client.enqueue(handlers.where, {"n": 2}, queue=routed["far"])
        assert near.result(timeout=20)["database"] == "default"
        assert far.result(timeout=20)["database"] == SECOND
        # Pool rows on each database, for the queue that lives there only.
        pools = {
            alias: [r[0] for r in fetch(alias, "SELECT queue_name FROM runnerq_worker_pools")]
            for alias in ("default", SECOND)
        }
        assert pools == {"default": [routed["near"]], SECOND: [routed["far"]]}
        # A child on its own database (named or not) runs; a spawn into the other one is refused.
        home = client.enqueue(handlers.spawn_home, {}, queue=routed["far"])
        assert home.result(timeout=20)["database"] == SECOND
        elsewhere = client.enqueue(handlers.spawn_elsewhere, {"into": "default"}, queue=routed["far"])
        with pytest.raises(client.ActivityFailed) as failed:
            elsewhere.result(timeout=20)
        assert "a child lives with its parent" in str(failed.value.error)
        row = fetch(SECOND, "SELECT retry_count FROM runnerq_activities WHERE id = %s", [elsewhere.id])
        assert row == [(0,)]  # non-retryable: one attempt of its three
        assert fetch(
            "default", "SELECT count(*) FROM runnerq_activities WHERE parent_activity_id IS NOT NULL"
        ) == [(0,)]
    finally:
        worker.request_stop("test over")
        worker.drain()
    for alias in ("default", SECOND):  # deregistered from both
        assert fetch(alias, "SELECT count(*) FROM runnerq_worker_pools") == [(0,)]


def test_a_worker_refuses_queues_of_several_databases_it_cannot_serve_alone(routed):
    from runnerq_django.worker.options import WorkerOptions
    from runnerq_django.worker.runtime import Worker, WorkerConfigurationError

    with pytest.raises(WorkerConfigurationError, match="build_worker"):
        Worker(WorkerOptions(queues=[routed["near"], routed["far"]], activity_types=["multidb.where"]))
    # --database / WorkerOptions.database puts every queue on that one, as before.
    worker = Worker(
        WorkerOptions(
            queues=[routed["near"], routed["far"]], activity_types=["multidb.where"], database=SECOND
        )
    )
    assert worker.alias == SECOND


def test_the_scheduler_enqueues_each_occurrence_once_on_the_jobs_database(routed, settings):
    from django.core.cache.backends.locmem import LocMemCache

    from runnerq_django.scheduler import service
    from tests.scheduler.conftest import T0, job

    namespace = f"m{time.monotonic_ns()}"
    jobs = [
        job("near", activity="multidb.where", queue=routed["near"], every=timedelta(minutes=1)),
        job("far", activity="multidb.where", queue=routed["far"], every=timedelta(minutes=1)),
    ]
    cache = LocMemCache(namespace, {})
    owner = service.build_core(jobs, namespace=namespace, cache=cache, lease_seconds=30, max_interval=5)
    other = service.build_core(
        jobs, namespace=namespace, cache=LocMemCache(namespace + "b", {}), lease_seconds=30, max_interval=5
    )
    for core in (owner, other, owner):  # the other one does not own the lease: it enqueues nothing
        core.tick(T0 + timedelta(seconds=30))
    owner.tick(T0 + timedelta(minutes=1, seconds=1))

    def occurrences(alias: str, job_id: str) -> list[str]:
        return [
            r[0]
            for r in fetch(
                alias,
                "SELECT metadata->>'periodic_occurrence' FROM runnerq_activities "
                "WHERE metadata->>'periodic_namespace' = %s AND metadata->>'periodic_job' = %s ORDER BY 1",
                [namespace, job_id],
            )
        ]

    both = ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]
    assert occurrences("default", "near") == both and occurrences(SECOND, "far") == both
    assert occurrences("default", "far") == [] and occurrences(SECOND, "near") == []
    guards = "SELECT job_id, count(*) FROM runnerq_periodic_occurrences WHERE namespace = %s GROUP BY 1"
    assert fetch(SECOND, guards, [namespace]) == [("far", 2)]
    assert fetch("default", guards, [namespace]) == [("near", 2)]
    # The lease lives on the scheduler's database only.
    lease = "SELECT count(*) FROM runnerq_periodic_lease WHERE namespace = %s"
    assert (fetch("default", lease, [namespace]), fetch(SECOND, lease, [namespace])) == ([(1,)], [(0,)])
    # Evidence is read where the job enqueues: a core with no record finds the far job's progress.
    fresh = service.build_core(
        jobs, namespace=namespace, cache=LocMemCache(namespace + "c", {}), lease_seconds=30, max_interval=5
    )
    assert fresh._evidence(["near", "far"]) == {
        "near": T0 + timedelta(minutes=1),
        "far": T0 + timedelta(minutes=1),
    }

    # Once a job is no longer declared, the system check finds its progress on the database its
    # occurrences went to (runnerq.W104), and only among the databases it is asked to check.
    from runnerq_django.scheduler.checks import check_orphaned_progress

    near = {"activity": "multidb.where", "queue": routed["near"], "every": 60}
    settings.RUNNERQ = {**settings.RUNNERQ, "SCHEDULER": {"NAMESPACE": namespace, "JOBS": {"near": near}}}
    warnings = check_orphaned_progress(None, databases=["default", SECOND])
    assert [w.id for w in warnings] == ["runnerq.W104"] and "'far'" in warnings[0].msg
    assert check_orphaned_progress(None, databases=["default"]) == []


def test_a_stale_fence_writes_nothing_on_the_jobs_database(routed):
    from runnerq_django.storage import periodic as store
    from tests.scheduler.conftest import T0

    namespace = f"f{time.monotonic_ns()}"
    token = store.acquire_lease(namespace, "owner", 0, 30)
    fence = store.Fence(namespace, "owner", token)
    key = f"periodic:{namespace}:far:{T0:%Y-%m-%dT%H:%M:%SZ}"
    queue, new = client.build_activity("multidb.where", {}, queue=routed["far"], idempotency_key=key)
    item = store.Occurrence(T0, key, queue, new)
    done = store.enqueue_occurrences(
        namespace, "far", [item], node="owner", fence=fence, fence_using="default", using=SECOND
    )
    assert [d.created for d in done] == [True]
    store.force_lease(namespace, "thief", 0, 30)
    key2 = key.replace("12:00:00", "12:01:00")
    queue, new = client.build_activity("multidb.where", {}, queue=routed["far"], idempotency_key=key2)
    with pytest.raises(store.LeaseLost):
        store.enqueue_occurrences(
            namespace,
            "far",
            [store.Occurrence(T0 + timedelta(minutes=1), key2, queue, new)],
            node="owner",
            fence=fence,
            fence_using="default",
            using=SECOND,
        )
    assert statuses(SECOND, routed["far"]) == ["pending"]  # the first only


def test_runnerq_status_schema_check_and_operator_commands_act_per_database(routed):
    near = client.enqueue(handlers.where, {}, queue=routed["near"])
    far = client.enqueue(handlers.where, {}, queue=routed["far"])
    out = io.StringIO()
    call_command("runnerq_status", "--json", stdout=out)
    report = json.loads(out.getvalue())["queues"]
    assert (
        report[routed["near"]]["database"] == "default" and report[routed["near"]]["counts"]["pending"] == 1
    )
    assert report[routed["far"]]["database"] == SECOND and report[routed["far"]]["counts"]["pending"] == 1
    table = io.StringIO()
    call_command("runnerq_status", stdout=table)
    assert "database" in table.getvalue().splitlines()[0]

    out = io.StringIO()
    call_command("runnerq_schema", "check", "--json", stdout=out)
    checked = json.loads(out.getvalue())
    assert checked["ok"] is True and [d["database"] for d in checked["databases"]] == ["default", SECOND]
    assert {d["server"].split(".")[0] for d in checked["databases"]} >= {"PostgreSQL 18"}

    # An operator command finds the queue's database by itself.
    call_command("runnerq_cancel", str(far.id), "--queue", routed["far"], "--json", stdout=io.StringIO())
    assert statuses(SECOND, routed["far"]) == ["cancelled"] and statuses("default", routed["near"]) == [
        "pending"
    ]
    assert near.status() == "pending"

    # A pause lands on the queue's database, and --list shows every database's.
    call_command("runnerq_pause", "--queue", routed["far"], "--reason", "t", "--json", stdout=io.StringIO())
    assert fetch(SECOND, "SELECT queue_name FROM runnerq_flow_pauses") == [(routed["far"],)]
    assert fetch("default", "SELECT queue_name FROM runnerq_flow_pauses") == []
    listed = io.StringIO()
    call_command("runnerq_pause", "--list", "--json", stdout=listed)
    assert [(p["database"], p["queue"]) for p in json.loads(listed.getvalue())["paused"]] == [
        (SECOND, routed["far"])
    ]


def test_the_admin_shows_and_acts_per_database(routed, admin_client):
    http = admin_client
    near = client.enqueue(handlers.where, {}, queue=routed["near"])
    far = client.enqueue(handlers.where, {}, queue=routed["far"])
    url = "/admin/runnerq_django/activity/"
    default_page = http.get(url).content.decode()
    assert str(near.id)[:8] in default_page and str(far.id)[:8] not in default_page
    assert "By database" in default_page
    second_page = http.get(url, {"database": SECOND}).content.decode()
    assert str(far.id)[:8] in second_page and str(near.id)[:8] not in second_page
    assert 'class="column-database_col"' in second_page
    assert http.get(url, {"database": "nowhere"}).status_code == 400
    # The detail page, reached from the second database's list, reads the second database.
    detail = http.get(f"{url}{far.id}/change/", {"_changelist_filters": f"database={SECOND}"})
    assert detail.status_code == 200 and routed["far"] in detail.content.decode()
    assert f'action="/admin/runnerq_django/activity/?database={SECOND}"' in detail.content.decode()
    # A link that does not say its database (a child's, an event's) finds the activity anyway.
    found = http.get(f"{url}{far.id}/change/")
    assert found.status_code == 200 and routed["far"] in found.content.decode()
    # The overview of the second database, and its live data.
    overview = http.get(f"{url}overview/", {"database": SECOND})
    assert (
        overview.status_code == 200
        and f"?queue={routed['far']}&amp;database={SECOND}" in overview.content.decode()
    )
    live = http.get(f"{url}overview/live.json", {"database": SECOND, "window": "1h"})
    assert live.status_code == 200
    # An action from the second database's list acts there.
    response = http.post(
        f"{url}?database={SECOND}",
        {"action": "cancel", "_selected_action": [str(far.id)], "runnerq_confirm": "1", "reason": "test"},
    )
    assert response.status_code in (200, 302)
    wait_until(
        lambda: statuses(SECOND, routed["far"]) == ["cancelled"], timeout=5, message="cancelled on second"
    )
    assert statuses("default", routed["near"]) == ["pending"]


def test_run_until_idle_runs_the_queues_of_both_databases(routed):
    from runnerq_django.testing import run_until_idle

    near = client.enqueue(handlers.where, {}, queue=routed["near"])
    far = client.enqueue(handlers.spawn_home, {}, queue=routed["far"])
    ran = run_until_idle(
        queues=[routed["near"], routed["far"]], types=["multidb.where", "multidb.spawn_home"]
    )
    assert {r.queue for r in ran} == {routed["near"], routed["far"]}
    assert near.result(timeout=1)["database"] == "default"
    assert far.result(timeout=1) == {
        "database": SECOND,
        "pid": far.result(timeout=1)["pid"],
        "payload": {"child": True},
    }
