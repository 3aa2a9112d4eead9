"""Re-running a workflow from a step (``runnerq_django.workflows.forks``, ``manage.py runnerq_fork``): a
fork keeps the steps recorded before the chosen one and runs it and the rest again, counted
with side-effect rows, by real worker processes."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from runnerq_django.exceptions import ActivityFailed
from runnerq_django.storage import errors
from runnerq_django.workflows import forks
from tests.fork import handlers
from tests.worker.support import fetch, runs, status_of, worker_processes


@pytest.fixture
def workers(live_db_url, runs_table, tmp_path):
    with worker_processes(live_db_url, tmp_path, "tests.fork.handlers") as start:
        yield start


def ran(activity_id) -> list[str]:
    return [r[1] for r in runs(activity_id=activity_id)]


def test_a_fork_of_a_nine_step_run_from_step_7_runs_steps_7_to_9_once_and_1_to_6_never(workers):
    workers("--poll-interval", "0.2")
    original = handlers.nine.enqueue({"base": 0})
    assert original.result(timeout=60) == list(range(1, 10))
    assert ran(original.id) == [f"s{i}" for i in range(1, 10)]

    fork = forks.fork(original, "s7", {"base": 100}, actor="test", reason="step 7 had a bug")
    # Steps 1-6 come from the original's checkpoints; 7-9 ran again with the new input.
    assert fork.result(timeout=60) == [1, 2, 3, 4, 5, 6, 107, 108, 109]
    assert ran(fork.id) == ["s7", "s8", "s9"]
    assert ran(original.id) == [f"s{i}" for i in range(1, 10)]  # the original was not touched
    (record,) = forks.forks_of(original)
    assert (record.fork_id, record.origin_id, record.from_step, record.actor, record.reason) == (
        fork.id,
        original.id,
        "run:s7",
        "test",
        "step 7 had a bug",
    )
    assert forks.forks_of(fork) == [record]  # the link both ways


def test_a_failed_run_forked_at_its_failing_step_finishes(workers):
    workers("--poll-interval", "0.2")
    original = handlers.nine.enqueue({"fail_at": "s7"})
    with pytest.raises(ActivityFailed):
        original.result(timeout=60)
    assert status_of(original.id) == "failed"
    fixed = forks.fork(original, "s7", {})  # the fix: the new input no longer breaks step 7
    assert fixed.result(timeout=60) == list(range(1, 10))
    assert ran(fixed.id) == ["s7", "s8", "s9"]


def test_children_spawned_before_the_step_are_reused_not_spawned_again(workers):
    workers("--poll-interval", "0.2")
    original = handlers.with_child.enqueue({"base": 0})
    assert original.result(timeout=60) == {"first": 1, "shipped": {"shipped": 1}, "second": 2, "third": 3}
    steps = [s.label for s in forks.steps_of(original)]
    assert steps == ["run:s1", "child:ship", "run:s2", "run:s3"]
    fork = forks.fork(original, "s3", {"base": 10})
    assert fork.result(timeout=60) == {"first": 1, "shipped": {"shipped": 1}, "second": 2, "third": 13}
    assert ran(fork.id) == ["s3"]
    assert [r for r in runs("child")] and len(runs("child")) == 1  # the child ran once, for the original
    # Forked before the spawn, the child step runs again: a new child.
    again = forks.fork(original, "ship")
    assert again.result(timeout=60)["shipped"] == {"shipped": 1}
    assert len(runs("child")) == 2 and ran(again.id) == ["s2", "s3"]


def test_a_parked_original_is_refused_or_cancelled_first(workers):
    workers("--poll-interval", "0.2")
    original = handlers.parks.enqueue({})
    from tests.helpers import wait_until

    wait_until(lambda: status_of(original.id) == "waiting", timeout=30, message="the run to park")
    with pytest.raises(errors.Conflict, match="cancel it first"):
        forks.fork(original, "s1")
    with pytest.raises(
        errors.InvalidArgument, match=r"from_step: the run recorded no step 'nope' \(its steps: run:s1"
    ):
        forks.fork(original, "nope", cancel_running=True)
    fork = forks.fork(original, "s1", cancel_running=True, reason="stuck")
    assert status_of(original.id) == "cancelled"
    fork.signal("go", "now")
    assert fork.result(timeout=60) == "now"
    assert ran(fork.id) == ["s1"]


def test_the_management_command_lists_steps_and_forks(workers, capsys):
    workers("--poll-interval", "0.2")
    original = handlers.nine.enqueue({})
    original.result(timeout=60)
    call_command("runnerq_fork", str(original.id), "--json")
    listed = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in listed["steps"]] == [f"run:s{i}" for i in range(1, 10)]
    call_command(
        "runnerq_fork",
        str(original.id),
        "--from-step",
        "s9",
        "--payload",
        '{"base": 1}',
        "--reason",
        "r",
        "--json",
    )
    made = json.loads(capsys.readouterr().out)
    fork_id = made["fork"]
    from runnerq_django import get_handle

    assert get_handle(fork_id).result(timeout=60)[-1] == 10
    assert fetch("SELECT actor, reason FROM runnerq_forks WHERE fork_id = %s", [fork_id])[0][0].startswith(
        "cli"
    )
