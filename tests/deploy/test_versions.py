"""Version gates across a simulated deploy: a run parked on the old code keeps the old branch
when the new code replays it; a run started on the new code takes the new branch, even at a gate
it reaches after parking. Real worker processes, one per code version."""

from __future__ import annotations

import pytest

from runnerq_django import signal
from tests.deploy import handlers
from tests.helpers import stop_process, wait_until
from tests.worker.support import fetch, runs, status_of, worker_processes


@pytest.fixture
def workers(live_db_url, runs_table, tmp_path):
    with worker_processes(live_db_url, tmp_path, "tests.deploy.handlers") as start:
        yield start


def test_a_run_parked_across_a_deploy_keeps_its_branch(workers):
    old_code = workers("--poll-interval", "0.2", env={"RQ_TEST_CODE": "1"})
    parked = handlers.flow.enqueue({})
    wait_until(lambda: status_of(parked.id) == "waiting", timeout=30, message="the run to park on code 1")
    assert [r[1] for r in runs(activity_id=parked.id)] == ["start-code1"]
    stop_process(old_code, timeout=30)  # the deploy: code 2 adds the gate

    workers("--poll-interval", "0.2", env={"RQ_TEST_CODE": "2"})
    started_after = handlers.flow.enqueue({})
    wait_until(lambda: status_of(started_after.id) == "waiting", timeout=30, message="the new run to park")
    signal(parked, "go", 1)
    signal(started_after, "go", 1)
    assert parked.result(timeout=60) == {"branch": "old", "code": 2}  # replayed by code 2, old branch
    assert started_after.result(timeout=60) == {"branch": "new", "code": 2}
    assert [r[1] for r in runs(activity_id=parked.id)] == ["start-code1", "price-old"]
    assert [r[1] for r in runs(activity_id=started_after.id)] == ["start-code2", "price-new"]
    # The branch each took is a checkpoint the detail page lists among the durable steps.
    recorded = fetch(
        "SELECT owner_activity_id, data->>'version' FROM runnerq_results WHERE step = 'version:pricing'"
    )
    assert dict(recorded) == {parked.id: "0", started_after.id: "2"}


def test_an_undeclared_gate_is_decided_when_reached(runnerq_worker):
    fresh = handlers.undeclared.enqueue({})
    parked_first = handlers.undeclared.enqueue({"park_first": True})
    runnerq_worker.run_until_idle(fast_forward=True)
    assert fresh.result(timeout=0) == 3  # nothing recorded: a new run
    # Its attempt found a sleep recorded: it may have started on code without the gate (which
    # is why a gate is declared: see the next test and the deploy test).
    assert parked_first.result(timeout=0) == 0


def test_a_declared_gate_is_recorded_when_a_new_run_starts(runnerq_worker):
    from runnerq_django.activities import versions

    versions.declare("d.undeclared", tone=3)
    try:
        run = handlers.undeclared.enqueue({"park_first": True})
        runnerq_worker.run_until_idle(fast_forward=True)
        assert run.result(timeout=0) == 3  # recorded with its first sleep, before the park
    finally:
        versions._gates.pop("d.undeclared", None)


def test_a_version_below_the_oldest_served_fails_the_run(runnerq_worker):
    from runnerq_django.activities import versions
    from runnerq_django.exceptions import ActivityFailed

    run = handlers.undeclared.enqueue({"park_first": True, "park_after": True})
    runnerq_worker.run_until_idle()  # parks on its first sleep
    runnerq_worker.run_until_idle(fast_forward=True, max_activities=1)  # takes version 0, parks again
    assert run.status() == "waiting"
    versions.declare("d.undeclared", tone=(1, 3))  # the deploy: version 0 is no longer served
    try:
        runnerq_worker.run_until_idle(fast_forward=True)
        with pytest.raises(ActivityFailed, match="version gate 'tone': this run took version 0"):
            run.result(timeout=0)
    finally:
        versions._gates.pop("d.undeclared", None)


def test_the_branch_taken_is_on_the_detail_page(runnerq_worker, client):
    from django.contrib.auth.models import User

    from runnerq_django.activities import versions

    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    versions.declare("d.undeclared", tone=3)
    try:
        run = handlers.undeclared.enqueue({})
        runnerq_worker.run_until_idle()
    finally:
        versions._gates.pop("d.undeclared", None)
    page = client.get(f"/admin/runnerq_django/activity/{run.id}/change/").content.decode()
    steps = page[page.index('id="rq-steps"') : page.index('id="rq-signals"')]
    assert "<td>version</td><td>tone</td><td>Ok</td>" in steps and "&quot;version&quot;: 3" in steps
